"""Ctrl-C and SIGTERM during a run: the first stops it after the phase in flight.

`signals_kept` keeps the first signal for the run loop, which calls `raise_received`
between phases; a second stops the run at once. Solo and together runs share them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from batchrl.training import compile_signals


@contextlib.contextmanager
def signals_kept() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM stop a run between phases; a second one raises KeyboardInterrupt.

    The first is kept in the list it yields, for the run loop's `raise_received` after
    the phase in flight, which is then kept, not dropped. A KeyboardInterrupt stops a
    phase only where Python runs in the main thread (a host env's call, a rollout
    actor's wait) and loses its work; a JAX-native phase ran to its end whatever came,
    and was dropped after (a phase of the seed's `humanoid` is a minute). The second
    raises at once, in whatever runs when it comes, or when an XLA compile it comes in
    returns (`compile_signals`); in a garbage collector's callback (JAX has one) Python
    prints it and drops it, and `raise_received` raises it again.
    In the main thread only, where Python takes signals; the handlers before are restored.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    compile_signals.raise_dropped()  # A Ctrl-C of the run's start that went nowhere.

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) > 1:
            if compile_signals.deferred(signum, frame):
                return
            raise KeyboardInterrupt(f"signal {name}")
        # os.write, not print: the handler may run inside a print to the same stream. At a
        # terminal, a new line ends the progress bar's.
        line = f"batchrl: {name}: stopping after this phase; again to stop now\n"
        with contextlib.suppress(OSError):  # No stderr, or a pipe's reader gone (`| tee`).
            os.write(2, (("\n" if os.isatty(2) else "") + line).encode())

    with compile_signals.stopping(interrupt):
        yield received


def raise_received(received: list[int]) -> None:
    """Raises KeyboardInterrupt if `signals_kept` received a signal: the run stops here."""
    if received:
        raise KeyboardInterrupt(f"signal {signal.Signals(received[0]).name}")

"""Ctrl-C and SIGTERM during a run: the first stops it after the phase in flight.

`signals_kept` keeps the first signal for the run loop, which calls `raise_received`
between phases; a second stops the run at once. Solo and together runs share them.

A phase on worker envs or the MuJoCo batch runs in one call of the main thread into
XLA, whose threads step the envs: Python runs the main thread's handler only when the
phase returns, so a Ctrl-C said nothing for a phase's length, and a second could not
stop a phase (nor one a hung worker holds, until its timeout). So the run also gives
Python a wakeup fd (`signal.set_wakeup_fd`: a byte a signal, written as it comes), on
which every wait on a worker also waits (`polling.watching`), and which the MuJoCo
batch reads before each step (`polling.hear`): what reads it counts the signal at once,
says so, and on the second raises KeyboardInterrupt out of the phase.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from batchrl.envs.host import errors, polling
from batchrl.training import compile_signals

logger = logging.getLogger(__name__)

_STOPS = (signal.SIGINT, signal.SIGTERM)


class _Counted:
    """The run's stop signals, each counted once: by the handler, or by a wait that read it.

    `ends` are the wakeup fd's socket pair, reading end first (None without one: a handler
    call counts one signal). Once a second signal has stopped the run, counted by a wait
    or a handler, every wait stops at once (the fd is kept readable), retiring its worker,
    not waiting on it to its timeout. The phase's own waits too: counted by a handler, a
    MuJoCo-batch phase ran on in XLA's threads, and the exit waited for it.
    """

    def __init__(self, received: list[int], ends: tuple[socket.socket, socket.socket] | None):
        self.received, self.ends = received, ends
        self.stopped: int | None = None  # The second signal, which stopped the run.
        self.by_handler = False  # Whether a handler counted it (not a wait, which raised).
        self._lock = threading.RLock()  # A handler may come inside `from_wait`, on its thread.

    def from_handler(self, signum: int) -> bool:
        """Counts the signals a handler call stands for; whether the handler stops the run.

        Once a handler stopped it, every call does (a signal sent again, a third press);
        once a wait did, none: the wait raised for the signal this call stands for.
        """
        with self._lock:
            if self.stopped is not None:
                return self.by_handler
            signums = self._read() if self.ends is not None else [signum]
            self.by_handler = bool(signums) and self._count(signums)
            return self.by_handler

    def from_wait(self) -> None:
        """Counts what the wakeup fd holds; KeyboardInterrupt on a second stop signal."""
        with self._lock:
            if self.stopped is None:
                signums = self._read()
                if signums:
                    self._count(signums)
        if self.stopped is not None:
            raise compile_signals.interrupt(self.stopped)

    def _read(self) -> list[int]:
        """The stop signals the wakeup fd holds, read empty; others' bytes dropped."""
        signums = []
        while True:
            try:
                data = self.ends[0].recv(256)
            except (BlockingIOError, InterruptedError):
                return signums
            if not data:  # Closed: nothing more will come.
                return signums
            signums += [number for number in data if number in _STOPS]

    def _count(self, signums: list[int]) -> bool:
        """Counts `signums`; on a second signal, stops the run: whether it did."""
        if not self.received:
            _announce(signums[0])
        self.received.extend(signums)
        if len(self.received) < 2:
            return False
        self.stopped = signums[-1]
        if self.ends is not None:  # Readable still: every wait stops too, the phase's own.
            self.ends[1].send(b"\0")
        return True


def _announce(signum: int) -> None:
    """Says that the run stops after this phase."""
    # os.write, not print: the handler may run inside a print to the same stream. At a
    # terminal, a new line ends the progress bar's.
    name = signal.Signals(signum).name
    line = f"batchrl: {name}: stopping after this phase; again to stop now\n"
    with contextlib.suppress(OSError):  # No stderr, or a pipe's reader gone (`| tee`).
        os.write(2, (("\n" if os.isatty(2) else "") + line).encode())


@contextlib.contextmanager
def _wakeup() -> Iterator[tuple[socket.socket, socket.socket] | None]:
    """A wakeup fd for the block: its socket pair, reading end first.

    None where one is set already (asyncio's), which stays.
    """
    ends = socket.socketpair()
    for end in ends:
        end.setblocking(False)
    before = signal.set_wakeup_fd(ends[1].fileno(), warn_on_full_buffer=False)
    try:
        if before != -1:  # Someone else's: theirs to keep.
            signal.set_wakeup_fd(before)
            yield None
        else:
            try:
                yield ends
            finally:
                signal.set_wakeup_fd(-1)
    finally:
        for end in ends:
            end.close()


@contextlib.contextmanager
def signals_kept() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM stop a run between phases; a second one raises KeyboardInterrupt.

    The first is kept in the list it yields, for the run loop's `raise_received` after
    the phase in flight, which is then kept, not dropped. A KeyboardInterrupt stops a
    phase where Python runs (a wait on a worker or on XLA, the MuJoCo batch's step, a
    rollout actor's wait) and loses its work (a phase of the seed's `humanoid` is a
    minute); a program whose wait it cuts runs on in XLA's threads. The second
    raises at once, in whatever runs when it comes, or when an XLA compile it comes in
    returns (`compile_signals`); dropped by Python in a garbage collector's callback (JAX
    has one), it is sent again at once, and dropped without a word, `raise_received`
    raises it after the phase.
    In the main thread only, where Python takes signals; the handlers before are restored.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    compile_signals.raise_dropped()  # A Ctrl-C of the run's start that went nowhere.
    with contextlib.ExitStack() as stack:
        ends = stack.enter_context(_wakeup())
        counted = _Counted(received, ends)

        def interrupt(signum: int, frame: Any) -> None:
            if counted.from_handler(signum) and not compile_signals.deferred(signum, frame):
                raise compile_signals.interrupt(signum)

        stack.enter_context(compile_signals.stopping(interrupt))
        if ends is not None:
            stack.enter_context(polling.watching(ends[0].fileno(), counted.from_wait))
        yield received


class Finished(KeyboardInterrupt):
    """A signal that came in a run's last phase: the run finished, then stops its caller.

    The command exits 0 on it, not 130: a scheduler has nothing left to run again.
    """


def raise_received(received: list[int]) -> None:
    """Raises KeyboardInterrupt if `signals_kept` received a signal: the run stops here."""
    if received:
        raise KeyboardInterrupt(f"signal {signal.Signals(received[0]).name}")


@contextlib.contextmanager
def stopping_over_env_errors(received: list[int]) -> Iterator[None]:
    """A phase a signal asked to stop after, failed by its envs, stops the run as asked.

    A worker that hangs after a Ctrl-C or SIGTERM failed the run at its timeout (exit 1,
    the signal unsaid): now the error is a warning, and the run is interrupted (130),
    the phase before kept.
    """
    try:
        yield
    except errors.EnvError as error:
        if not received:
            raise
        logger.warning("%s; the run stops, as the signal asked", error)
        raise_received(received)

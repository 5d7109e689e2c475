"""A signal that would stop the program inside an XLA compile stops it when the compile ends.

JAX waits for a compile on a thread of XLA's own, and a signal ends that wait: the
KeyboardInterrupt a handler raises there leaves XLA compiling while Python exits, and the
compile then crashes the exiting process (SIGSEGV, exit 139 where 130 is due). A Ctrl-C
pressed twice while the first phase compiles did that. `deferred` sends the signal to the
main thread again once the compile has returned, where its handler raises as it would have.
`stopping(handler)` gives Ctrl-C and SIGTERM to a handler for a block, by default
`raise_interrupt`, which stops the program at once. A signal sent again can land in a
garbage collector's callback (JAX has one), where Python prints the KeyboardInterrupt and
drops it; `raise_dropped`, called where a run begins its phases, raises it again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

# JAX's Python frames that wait for XLA's compile (`backend_compile` before JAX 0.5).
_COMPILE_FRAMES = frozenset({"backend_compile_and_load", "backend_compile"})
_resending = threading.Lock()  # Held while a signal waits to be sent again.
_raised: list[int] = []  # The signals `raise_interrupt` raised in a `stopping` block.


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """Raises KeyboardInterrupt, once an XLA compile it comes in has returned (`deferred`).

    Python's own Ctrl-C raises in the compile, and the process crashes.
    """
    if not deferred(signum, frame):
        _raised.append(signum)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def raise_dropped() -> None:
    """Raises KeyboardInterrupt again if `raise_interrupt` raised one that went nowhere.

    Once raised in a garbage collector's callback, Python printed it and dropped it, and
    a run pressed before its first phase trained to its end (exit status 0, not 130).
    """
    if _raised:
        signum = _raised[0]
        _raised.clear()
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def stopping(
    handler: Callable[[int, FrameType | None], None] = raise_interrupt,
) -> Iterator[None]:
    """`handler` takes Ctrl-C and SIGTERM in the block; the handlers before come back after.

    A signal ignored (a background job's Ctrl-C) stays ignored. Outside the main thread,
    where Python takes no signals, it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    kept = {number: old for number, old in kept.items() if old != signal.SIG_IGN}
    for number in kept:
        signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in kept.items():
            signal.signal(number, old)
        _raised.clear()  # Raised out of the block, or dropped in it: the block is over.


def in_compile(frame: FrameType | None) -> bool:
    """Whether `frame` or a frame that called it waits for an XLA compile."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in _COMPILE_FRAMES and code.co_filename.endswith("compiler.py"):
            return True
        frame = frame.f_back
    return False


def deferred(signum: int, frame: FrameType | None) -> bool:
    """True if the main thread waits in a compile: `signum` comes again when it returns.

    For a signal handler that would raise: it returns instead when this is True. Signals
    that come while one waits are dropped, as the one sent again stops the program.
    """
    if not in_compile(frame):
        return False
    if _resending.acquire(blocking=False):
        main = threading.main_thread().ident
        threading.Thread(target=_resend, args=(main, signum), daemon=True).start()
        line = f"batchrl: {signal.Signals(signum).name}: stopping when XLA's compile returns\n"
        with contextlib.suppress(OSError):  # os.write: the handler may run inside a print.
            os.write(2, line.encode())
    return True


def _resend(main: int, signum: int) -> None:
    """Sends `signum` to thread `main` once its compile has returned."""
    try:
        while in_compile(sys._current_frames().get(main)):
            time.sleep(0.02)
    finally:
        _resending.release()
    signal.pthread_kill(main, signum)

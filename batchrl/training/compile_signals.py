"""A signal that would stop the program inside an XLA compile stops it when the compile ends.

JAX waits for a compile on a thread of XLA's own, and a signal ends that wait: the
KeyboardInterrupt a handler raises there leaves XLA compiling while Python exits, and the
compile then crashes the exiting process (SIGSEGV, exit 139 where 130 is due). A Ctrl-C
pressed twice while the first phase compiles did that. `deferred` sends the signal to the
main thread again once the compile has returned, where its handler raises as it would have.
`stopping(handler)` gives Ctrl-C and SIGTERM to a handler for a block, by default
`raise_interrupt`, which stops the program at once.

A handler's KeyboardInterrupt (`interrupt`) can land in a garbage collector's callback
(JAX has one), where Python prints it and drops it: a Ctrl-C pressed twice in a long
phase then printed a traceback and stopped nothing. In a `stopping` block the signal is
sent again at once instead, its handler raising outside the callback. One dropped without
a word is raised again by `raise_dropped`, called where a run begins its phases.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from batchrl.training import thread_stack

# JAX's Python frames that wait for XLA's compile (`backend_compile` before JAX 0.5).
_COMPILE_FRAMES = frozenset({"backend_compile_and_load", "backend_compile"})
_resending = threading.Lock()  # Held while a signal waits to be sent again.
_raised: list[int] = []  # The signals `raise_interrupt` raised in a `stopping` block.
_last: list[tuple[KeyboardInterrupt, int]] = []  # `interrupt`'s last, and its signal.
# `stopping` blocks ended, and `interrupt`s made: a signal is sent again only in the block
# it came in, and only while no stop was raised since (one raised in its place ends the
# block, whose cleanup a stop sent again would cut short).
_count = {"blocks": 0, "stops": 0}
_count_lock = threading.RLock()  # A handler may come while this thread holds it.


def interrupt(signum: int) -> KeyboardInterrupt:
    """The KeyboardInterrupt that stops the run for `signum`: sent again if Python drops it."""
    raised = KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    with _count_lock:
        _count["stops"] += 1
        _last[:] = [(raised, signum)]
    return raised


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """Raises KeyboardInterrupt, once an XLA compile it comes in has returned (`deferred`).

    Python's own Ctrl-C raises in the compile, and the process crashes.
    """
    if not deferred(signum, frame):
        _raised.append(signum)
        raise interrupt(signum)


def _counts() -> tuple[int, int]:
    with _count_lock:
        return _count["blocks"], _count["stops"]


def _send(signum: int, counts: tuple[int, int]) -> None:
    """Sends `signum` again to the main thread if `_count` is still `counts`.

    As `_thread.interrupt_main` does: the handler in place when it comes runs, and never a
    default action (sent after its block, SIGTERM killed the process: exit 143).
    """
    with _count_lock:
        if (_count["blocks"], _count["stops"]) == counts:
            _thread.interrupt_main(signum)


def raise_dropped() -> None:
    """Raises KeyboardInterrupt again if `raise_interrupt` raised one that went nowhere.

    Once one was dropped without a traceback, and a run pressed before its first phase
    trained to its end (exit status 0, not 130).
    """
    if _raised:
        signum = _raised[0]
        _raised.clear()
        raise interrupt(signum)


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
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_send_again_if_dropped, hook)
    try:
        yield
    finally:
        with _count_lock:
            _count["blocks"] += 1  # Nothing is sent again from here on.
        sys.unraisablehook = hook
        stop = _restore(kept)
        _raised.clear()  # Raised out of the block, or dropped in it: the block is over.
        _last.clear()
    if stop is not None:  # Sent just before the block ended, it ran as it ended.
        raise stop


def _restore(kept: dict[int, Any]) -> KeyboardInterrupt | None:
    """Puts back the handlers `kept`; returns the stop a handler pending there raised.

    `signal.signal` runs the handlers of signals that came first, which may raise.
    """
    stop = None
    for number, old in kept.items():
        while True:
            try:
                signal.signal(number, old)
                break
            except KeyboardInterrupt as raised:
                stop = raised
    return stop


def _send_again_if_dropped(hook: Callable[[Any], None], unraisable: Any) -> None:
    """Sends the signal of an `interrupt` Python dropped to the main thread again; else `hook`.

    `sys.unraisablehook`: Python calls it with what it drops (an exception raised in a
    garbage collector's callback, a `__del__`).
    """
    if _last and unraisable.exc_value is _last[0][0]:
        signum = _last.pop()[1]
        _raised.clear()  # Sent again: raised again, not also by `raise_dropped`.
        # Sent from here, its handler would run at once, in here, where it is dropped too.
        arguments = (threading.main_thread().ident, signum, _counts())
        threading.Thread(target=_send_out_of_hook, args=arguments, daemon=True).start()
    else:
        hook(unraisable)


def _send_out_of_hook(main: int, signum: int, counts: tuple[int, int]) -> None:
    """Sends `signum` again once thread `main` has left `_send_again_if_dropped`."""
    while _runs(main, lambda file, name: name == "_send_again_if_dropped"):
        time.sleep(0.001)
    _send(signum, counts)


def _runs(thread: int, match: Callable[[str, str], bool]) -> bool:
    """Whether `thread` runs a function `match`es; True while its stack cannot be read."""
    functions = thread_stack.functions(thread)
    return functions is None or any(match(file, name) for file, name in functions)


def in_compile(frame: FrameType | None) -> bool:
    """Whether `frame` or a frame that called it waits for an XLA compile.

    For a frame of this thread's: another thread's are read by `compiling`.
    """
    while frame is not None:
        if _is_compile(frame.f_code.co_filename, frame.f_code.co_name):
            return True
        frame = frame.f_back
    return False


def compiling(functions: list[tuple[str, str]] | None) -> bool:
    """Whether a thread running `functions` (`thread_stack.functions`) waits for a compile.

    True where they could not be read (None).
    """
    return functions is None or any(_is_compile(file, name) for file, name in functions)


def _is_compile(file: str, function: str) -> bool:
    return function in _COMPILE_FRAMES and file.endswith("compiler.py")


def deferred(signum: int, frame: FrameType | None) -> bool:
    """True if the main thread waits in a compile: `signum` comes again when it returns.

    For a signal handler that would raise: it returns instead when this is True. Signals
    that come while one waits are dropped, as the one sent again stops the program.
    """
    if not in_compile(frame):
        return False
    if _resending.acquire(blocking=False):
        arguments = (threading.main_thread().ident, signum, _counts())
        threading.Thread(target=_resend, args=arguments, daemon=True).start()
        line = f"batchrl: {signal.Signals(signum).name}: stopping when XLA's compile returns\n"
        with contextlib.suppress(OSError):  # os.write: the handler may run inside a print.
            os.write(2, line.encode())
    return True


def _resend(main: int, signum: int, counts: tuple[int, int]) -> None:
    """Sends `signum` again once thread `main`'s compile has returned."""
    try:
        while _runs(main, _is_compile):
            time.sleep(0.02)
    finally:
        _resending.release()
    _send(signum, counts)

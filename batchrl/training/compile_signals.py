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
a word is raised again by `raise_dropped`, called where a run begins its phases. A
handler that counts signals (`run_signals`) tells a signal sent again by `sent_again`.
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
_again: list[int] = []  # Signals sent again, on their way to the main thread's handler.
_blocks = [0]  # `stopping` blocks ended: a signal is sent again in its own block only.
_blocks_lock = threading.Lock()


def interrupt(signum: int) -> KeyboardInterrupt:
    """The KeyboardInterrupt a handler raises for `signum`: sent again if Python drops it."""
    raised = KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    _last[:] = [(raised, signum)]
    return raised


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """Raises KeyboardInterrupt, once an XLA compile it comes in has returned (`deferred`).

    Python's own Ctrl-C raises in the compile, and the process crashes.
    """
    sent_again(signum)  # Taken: this handler raises for any signal.
    if not deferred(signum, frame):
        _raised.append(signum)
        raise interrupt(signum)


def sent_again(signum: int) -> bool:
    """Whether `signum`, come to a handler, is one this module sent again (taken once).

    A handler that counts signals must raise for it, not count it anew.
    """
    if signum in _again:
        _again.remove(signum)
        return True
    return False


def _send(signum: int, block: int) -> None:
    """Sends `signum` again to the main thread, marked, if `stopping` block `block` runs.

    As `_thread.interrupt_main` does, which runs the handler in place when it comes, and
    no default action: sent after its block, SIGTERM killed the process (exit 143).
    """
    with _blocks_lock:
        if block == _blocks[0]:
            _again.append(signum)
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
        with _blocks_lock:
            _blocks[0] += 1
        sys.unraisablehook = hook
        for number, old in kept.items():
            signal.signal(number, old)
        _raised.clear()  # Raised out of the block, or dropped in it: the block is over.
        _last.clear()
        _again.clear()


def _send_again_if_dropped(hook: Callable[[Any], None], unraisable: Any) -> None:
    """Sends the signal of an `interrupt` Python dropped to the main thread again; else `hook`.

    `sys.unraisablehook`: Python calls it with what it drops (an exception raised in a
    garbage collector's callback, a `__del__`).
    """
    if _last and unraisable.exc_value is _last[0][0]:
        signum = _last.pop()[1]
        _raised.clear()  # Sent again: raised again, not also by `raise_dropped`.
        # Sent from here, its handler would run at once, in here, where it is dropped too.
        arguments = (threading.main_thread().ident, signum, _blocks[0])
        threading.Thread(target=_send_out_of_hook, args=arguments, daemon=True).start()
    else:
        hook(unraisable)


def _send_out_of_hook(main: int, signum: int, block: int) -> None:
    """Sends `signum` again once thread `main` has left `_send_again_if_dropped`."""
    while any(name == "_send_again_if_dropped" for _, name in thread_stack.functions(main)):
        time.sleep(0.001)
    _send(signum, block)


def in_compile(frame: FrameType | None) -> bool:
    """Whether `frame` or a frame that called it waits for an XLA compile.

    For a frame of this thread's: another thread's are read by `compiling`.
    """
    while frame is not None:
        if _is_compile(frame.f_code.co_filename, frame.f_code.co_name):
            return True
        frame = frame.f_back
    return False


def compiling(functions: list[tuple[str, str]]) -> bool:
    """Whether a thread running `functions` (`thread_stack.functions`) waits for a compile."""
    return any(_is_compile(file, name) for file, name in functions)


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
        arguments = (threading.main_thread().ident, signum, _blocks[0])
        threading.Thread(target=_resend, args=arguments, daemon=True).start()
        line = f"batchrl: {signal.Signals(signum).name}: stopping when XLA's compile returns\n"
        with contextlib.suppress(OSError):  # os.write: the handler may run inside a print.
            os.write(2, line.encode())
    return True


def _resend(main: int, signum: int, block: int) -> None:
    """Sends `signum` again once thread `main`'s compile has returned."""
    try:
        while compiling(thread_stack.functions(main)):
            time.sleep(0.02)
    finally:
        _resending.release()
    _send(signum, block)

"""How a command's process ends: at once when stopped, and with the sweep that started it.

A second Ctrl-C or SIGTERM stops a run inside its phase (`training/run_signals`). A
JAX-native phase is one XLA program: the wait for it is cut, but the program runs on in
XLA's threads to its end, and Python's own exit waits for it as it frees XLA's client
(a phase of millions of steps is minutes; the command had said "interrupted" long
before). By then the run has saved its checkpoint and closed its envs and files, so an
interrupted command runs the exit functions (Ray's shutdown, multiprocessing's,
logging's) and ends the process, skipping only the rest of Python's teardown.
(`atexit._run_exitfuncs` is CPython's own, the call its exit makes.)

A sweep's run gets SIGTERM from the kernel when the sweep dies (`terminate_with_parent`,
Linux), so it saves its checkpoint and ends as on Ctrl-C.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import NoReturn

INTERRUPTED = 130  # The shell's status for a command Ctrl-C stopped.
# Set by a parent to its pid: the command it starts is to end when that parent dies.
PARENT = "BATCHRL_TERMINATE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def first_line(error: BaseException) -> str:
    """The first line of an error's message: the one a command ends with.

    Its type's name where the message is empty (a bare `assert`, a `MemoryError()`).
    """
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def leave(status: int) -> NoReturn:
    """Exits with `status`; when interrupted, without waiting for XLA's programs in flight.

    A Ctrl-C or SIGTERM in the exit (JAX's, multiprocessing's) ends it at once with
    `status`, not with the signal's: a run that finished as `timeout` or a scheduler
    stopped it was read as killed (143), or printed a traceback. In Python's own
    teardown, past the point where it hands the signals back to their defaults (freeing
    XLA's client, near a second), they are ignored: there the process ends as it would.
    """

    def decided(_signum: int, _frame: object) -> NoReturn:
        _flush()
        os._exit(status)

    for number in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(number) != signal.SIG_IGN:  # A background job's stays ignored.
            signal.signal(number, decided)
    if status != INTERRUPTED:
        for thread in threading.enumerate():  # As Python's exit joins them before its exit
            if not thread.daemon and thread is not threading.main_thread():  # functions.
                thread.join()
        atexit._run_exitfuncs()  # Under `decided`, as Python's exit would run them next.
        # Python keeps a signal ignored through its teardown; a handler of its own, it
        # sets back to the default there, which ended the process as killed.
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        sys.exit(status)
    atexit._run_exitfuncs()  # Python's exit runs them first too; then it frees XLA's client.
    _flush()
    os._exit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # Closed, or a pipe whose reader is gone.
            stream.flush()


def command(main: Callable[[], int]) -> NoReturn:
    """Runs a command's `main` as its own process, `python -m` or pip's `batchrl` script.

    MuJoCo's warnings routed (each once, no MUJOCO_LOG.TXT), SIGTERM when a sweep that
    started it dies, and its exit as `leave` makes it. A crash in C (an env's binding
    that segfaults as it is built) prints where it was, where the command ended unsaid.
    """
    from batchrl.envs.host import mujoco_warnings

    faulthandler.enable()
    mujoco_warnings.route()
    terminate_with_parent()
    leave(main())


def with_parent(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (this process's by default) for a child that is to end when this one does.

    The child, a batchrl command or a script that calls `terminate_with_parent`, gets
    SIGTERM from the kernel when this process dies, by a signal or its own exit.
    """
    return {**(os.environ if environ is None else environ), PARENT: str(os.getpid())}


def sigterm_exits() -> None:
    """SIGTERM ends this process as `sys.exit(143)` does: its `finally` and `with` blocks run.

    For a script whose commands run as its children (the benchmarks): the child that
    `subprocess.run` waits on is killed and its temporary folder removed, where SIGTERM's
    default action (`timeout`'s) left both behind.
    """

    def exit_(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_)


def terminate_with_parent() -> None:
    """SIGTERM to this process when the parent `PARENT` names dies (Linux), if it asked.

    Set in the command itself, not in a `preexec_fn` between fork and exec: Python code
    there is unsafe where threads run (JAX's, once a sweep evaluated a kept best), and JAX
    warned of the fork.
    """
    parent = os.environ.pop(PARENT, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # It died before the kernel was asked: as if after.
        os.kill(os.getpid(), signal.SIGTERM)

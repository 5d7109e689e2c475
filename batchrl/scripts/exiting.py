"""A stopped command exits at once, not when the XLA program it left running ends.

A second Ctrl-C or SIGTERM stops a run inside its phase (`training/run_signals`). A
JAX-native phase is one XLA program: the wait for it is cut, but the program runs on in
XLA's threads to its end, and Python's own exit waits for it as it frees XLA's client
(a phase of millions of steps is minutes; the command had said "interrupted" long
before). By then the run has saved its checkpoint and closed its envs and files, so an
interrupted command runs the exit functions (Ray's shutdown, multiprocessing's,
logging's) and ends the process, skipping only the rest of Python's teardown.
(`atexit._run_exitfuncs` is CPython's own, the call its exit makes.)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

INTERRUPTED = 130  # The shell's status for a command Ctrl-C stopped.


def leave(status: int) -> NoReturn:
    """Exits with `status`; when interrupted, without waiting for XLA's programs in flight."""
    if status != INTERRUPTED:
        sys.exit(status)
    atexit._run_exitfuncs()  # Python's exit runs them first too; then it frees XLA's client.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # Closed, or a pipe whose reader is gone.
            stream.flush()
    os._exit(status)

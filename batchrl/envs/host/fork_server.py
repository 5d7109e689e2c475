"""The fork server outlives a SIGTERM sent to every process of a job, as its workers do.

A scheduler that stops a job signals each of its processes (Slurm's `scancel`, systemd,
`timeout`, a `kill` of the process group): the fork server too, the workers' parent in
the kernel's eyes, whose death killed every worker at once (`worker._die_with_parent`).
The run, which stops after its phase on a SIGTERM and saves a checkpoint, then failed
its phase ("died (exit code 255) during reset") instead.

Imported by the fork server alone, as it starts (`lifecycle.PRELOAD`): the server blocks
SIGTERM, so one sent to it waits unseen, and it ends, as ever, when the parent's end of its
pipe closes. It blocks SIGINT too: multiprocessing ignores it in the server only once the
preloads are imported, and a job's Ctrl-C in those seconds printed the server's traceback
(and a helper's that MuJoCo's import starts) under the command's one line. Each process it
forks unblocks both at once: a user's own processes from the same server end at them as
before, one sent before the unblock included (blocked, it waited; ignored, it would have
been lost). Workers ignore them themselves (`worker.main`).

Every worker holds the server's "alive" pipe, so the server lives while they do, and the
kernel kills a worker when the server dies (`worker._die_with_parent`). A worker stuck in
a C call holding the GIL, or stopped, ran no watchdog: it outlived a killed parent, and
the server with it, for good. A server started by the parent's main thread
(`start_tied`) is killed by the kernel when the parent dies, and its workers with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
_BLOCKED = {signal.SIGTERM, signal.SIGINT}  # In the server; each process it forks unblocks.
# Set while the parent's main thread starts the server: the pid the server's life is tied to.
TIED_TO = "BATCHRL_FORK_SERVER_TIED_TO"


def _in_fork_server() -> bool:
    """Whether this process is multiprocessing's fork server, importing its preloads.

    Not a process it forked, which runs below the server's `main` too (`_serve_one`): one
    that imports batchrl as it starts (a user's script that imports it, run again in a
    forkserver child of theirs) blocked SIGTERM in itself and every process it started.
    """
    names, frame = set(), sys._getframe()
    while frame is not None:
        if frame.f_code.co_filename == multiprocessing.forkserver.__file__:
            names.add(frame.f_code.co_name)
        frame = frame.f_back
    return "main" in names and "_serve_one" not in names


def _unblock_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _BLOCKED)


def start_tied() -> None:
    """Starts multiprocessing's fork server, where none runs, tied to this process's life.

    From the main thread only: the kernel's parent-death signal follows the thread that
    started the server, and another thread may end long before the process does. A
    server already running (a user's own) or started by another thread is left untied.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    os.environ[TIED_TO] = str(os.getpid())
    # Blocked from its start, in every thread it makes: numpy's import starts OpenBLAS's
    # before this module's own block, and the kernel gave that thread a SIGTERM sent to
    # the server, whose default action ended the server, its workers with it. The resource
    # tracker first: starting it unblocks both here.
    multiprocessing.resource_tracker.ensure_running()
    kept = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, kept)
        os.environ.pop(TIED_TO, None)


def _tie_to_parent() -> None:
    """SIGKILL from the kernel when the parent that asked for it (`start_tied`) dies."""
    parent = os.getppid()
    if os.environ.pop(TIED_TO, None) != str(parent):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # Not Linux: the alive pipe still ends the server after its workers.
    if os.getppid() != parent:  # It died before the signal was asked for: reparented.
        os._exit(1)


def _preload_mujoco() -> None:
    """Imports Gymnasium's MuJoCo envs once for every worker, where they import at all.

    Not as a preloaded module name: multiprocessing skips one that is not installed but
    dies of any other error, and MuJoCo raises one for a `MUJOCO_GL` whose library is
    missing: no worker could start, MuJoCo's or not.
    """
    with contextlib.suppress(Exception):
        import gymnasium.envs.mujoco  # noqa: F401


if _in_fork_server():
    # The mask is the forking thread's, which a child starts with: the server's one thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    os.register_at_fork(after_in_child=_unblock_signals)
    _tie_to_parent()
    _preload_mujoco()

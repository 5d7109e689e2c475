"""The fork server outlives a SIGTERM sent to every process of a job, as its workers do.

A scheduler that stops a job signals each of its processes (Slurm's `scancel`, systemd,
`timeout`, a `kill` of the process group): the fork server too, the workers' parent in
the kernel's eyes, whose death killed every worker at once (`worker._die_with_parent`).
The run, which stops after its phase on a SIGTERM and saves a checkpoint, then failed
its phase ("died (exit code 255) during reset") instead.

Imported by the fork server alone, as it starts (`lifecycle.PRELOAD`): the server blocks
SIGTERM, so one sent to it waits unseen, and it ends, as ever, when the parent's end of its
pipe closes. Each process it forks unblocks SIGTERM at once: a user's own processes from
the same server end at SIGTERM as before, one sent before the unblock included (blocked,
it waited; ignored, it would have been lost). Workers ignore it themselves (`worker.main`).
"""

from __future__ import annotations

import multiprocessing.forkserver
import os
import signal
import sys


def _in_fork_server() -> bool:
    """Whether this process is multiprocessing's fork server, whose main calls its `main`."""
    return getattr(sys.modules.get("__main__"), "main", None) is multiprocessing.forkserver.main


def _unblock_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if _in_fork_server():
    # The mask is the forking thread's, which a child starts with: the server's one thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    os.register_at_fork(after_in_child=_unblock_sigterm)

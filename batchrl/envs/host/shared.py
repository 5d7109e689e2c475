"""Shared memory between the parent and one worker: a file in /dev/shm, mapped by both.

The parent creates the file, the worker maps it by path, and the parent removes the
path as soon as the worker has mapped it, so nothing is left behind even if both
processes are killed later.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import tempfile


def _directory() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def create(nbytes: int) -> tuple[str, mmap.mmap]:
    """Creates a zeroed shared file of `nbytes`; returns its path and the parent's mapping.

    Its pages are reserved at once: a file merely truncated to its size takes them as
    they are written, and a /dev/shm too small for them (Docker's 64 MiB) killed the
    worker that wrote one with SIGBUS. A one-line MemoryError says so instead.
    """
    fd, path = tempfile.mkstemp(prefix="batchrl-", dir=_directory())
    try:
        os.ftruncate(fd, nbytes)
        _reserve(fd, nbytes, os.path.dirname(path))
        return path, mmap.mmap(fd, nbytes)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _reserve(fd: int, nbytes: int, directory: str) -> None:
    """Allocates the file's `nbytes` in `directory`; a MemoryError where they do not fit."""
    if not hasattr(os, "posix_fallocate"):  # macOS: no /dev/shm either.
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as error:
        if error.errno != errno.ENOSPC:  # A file system that cannot say: written as before.
            return
        stats = os.statvfs(directory)
        free, size = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
        raise MemoryError(
            f"a worker's shared memory of {_human(nbytes)} does not fit {directory} "
            f"({_human(free)} free of {_human(size)}): give it more room (docker run "
            "--shm-size=2g) or step fewer envs"
        ) from None


def _human(count: int) -> str:
    """Bytes in MiB, as /dev/shm's sizes are read: `64.0 MiB`."""
    return f"{count / 2**20:,.1f} MiB"


def attach(path: str, nbytes: int) -> mmap.mmap:
    """Maps the shared file at `path` (in the worker)."""
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    """Removes the shared file's path; existing mappings stay valid."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

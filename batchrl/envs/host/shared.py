"""Shared memory between the parent and one worker: a file in /dev/shm, mapped by both.

The parent creates the file, the worker maps it by path, and the parent removes the
path as soon as the worker has mapped it, so nothing is left behind even if both
processes are killed later.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile


def _directory() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def create(nbytes: int) -> tuple[str, mmap.mmap]:
    """Creates a zeroed shared file of `nbytes`; returns its path and the parent's mapping."""
    fd, path = tempfile.mkstemp(prefix="batchrl-", dir=_directory())
    try:
        os.ftruncate(fd, nbytes)
        return path, mmap.mmap(fd, nbytes)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


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

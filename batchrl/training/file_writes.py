"""Files written whole or not at all, and the one-line error for one that cannot be.

A run folder's config, spec and checkpoints are written to a temporary name, fsynced
and renamed (`write_atomic`), so a crash leaves the old file or the new one. A full
disk or a read-only folder is a `WriteError` naming the file and what to do. Imports
no JAX.
"""

from __future__ import annotations

import errno
import os
import pathlib
import tempfile


class WriteError(OSError):
    """A file of a run folder that could not be written (a full disk, a read-only folder).

    One line naming the file and what to do; the files written before are kept whole.
    `path` and `cause` let it be said again (`run_folder.removed_if_refused`).
    """

    def __init__(
        self, message: str, path: pathlib.Path | None = None, cause: OSError | None = None
    ):
        super().__init__(message)
        self.path, self.cause = path, cause


def write_error(path: pathlib.Path, error: OSError, started: bool = True) -> WriteError:
    """The WriteError for `error`, met writing `path`: the file, why, and what to do.

    `started`: the run folder holds a run to resume; else the command starts it again.
    """
    said = f"cannot write {str(path)!r}: {error.strerror or error}"
    if isinstance(error, NotADirectoryError):  # A file where the path needs a folder.
        return WriteError(f"{said}; a file stands in its path", path, error)
    if isinstance(error, IsADirectoryError):
        return WriteError(f"{said}; a folder stands at its path", path, error)
    kept = "the run folder keeps its last good files: " if started else ""
    then = "resume the run (--timestamp)" if started else "run the command again"
    folder = repr(str(path.parent))
    fix = {  # What would let the write through, where the error says.
        errno.ENOSPC: "make room on its disk",
        errno.EDQUOT: "make room within its quota",
        errno.EACCES: f"make {folder} writable",
        errno.EPERM: f"make {folder} writable",
        errno.EROFS: f"write to a disk mounted writable, not {folder}",
        errno.ENOENT: f"write to a folder that can be made, not {folder}",
    }.get(error.errno, f"make room or make {folder} writable")
    return WriteError(f"{said}; {kept}{fix}, then {then}", path, error)


def write_atomic(path: pathlib.Path, data: bytes | str) -> None:
    """Writes `data` to `path` whole or not at all, as a file `open` would make it.

    A temporary file beside `path`, fsynced, is renamed onto it, so a crash leaves the
    old file or the new one, never a part; the folder is fsynced so the rename lasts.
    The file gets `open`'s mode (0666 less the umask), not the temporary file's 0600:
    whoever may read the run folder may read its config and checkpoints.
    Its folder is made if missing. A file that cannot be written is a one-line
    `WriteError` naming it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
    except OSError as error:
        raise write_error(path, error) from error
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode() if isinstance(data, str) else data)
            file.flush()
            os.fchmod(file.fileno(), 0o666 & ~_umask())
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        pathlib.Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise write_error(path, error) from error
        raise
    if hasattr(os, "O_DIRECTORY"):  # Make the rename itself durable (POSIX).
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _umask() -> int:
    """This process's umask (read by setting it, and set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

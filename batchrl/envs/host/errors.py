"""Errors an env worker can raise in the parent: the env raised, the worker died, or it hung.

They pickle with every field, so they cross processes and Ray actors as they are.
"""

from __future__ import annotations

import contextlib
import functools
import pathlib
import re
import sys
import sysconfig
import traceback
from typing import Any

_FRAME = re.compile(r'^\s*File "(.+?)", line (\d+)', re.MULTILINE)
# Where code that is not the user's lives: Python's library, installed packages, batchrl.
_LIBRARIES = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(pathlib.Path(__file__).parents[2])}
)
# Set on an env's exception: the env's place among its group's envs, which the error names.
_ENV_INDEX = "batchrl_env_index"
_RAISED_HERE = "batchrl_raised_here"  # `note_here`'s: which env in this process, in what.


class SpaceMismatchError(ValueError, RuntimeError):
    """Envs of one batch whose spaces do not batch together.

    A ValueError, as batchrl refuses bad input, and a RuntimeError, as `AsyncVectorEnv`
    raises it, so code written for either catches it.
    """


class EnvError(RuntimeError):
    """A batched env failed. `env` names it; `command` is what the parent asked of it."""

    def __init__(self, message: str, env: str = "", command: str = ""):
        super().__init__(message)
        self.env = env
        self.command = command

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), str(self), dict(self.__dict__))

    def __str__(self) -> str:  # The message, not a second base's form (KeyError's repr).
        return BaseException.__str__(self)


def reworded(error: EnvError, message: str) -> EnvError:
    """`error` (its type and fields: a worker's traceback, the env's type) saying `message`."""
    return _rebuild(type(error), message, dict(error.__dict__))


def _rebuild(kind: type, message: str, fields: dict[str, Any]) -> EnvError:
    """An error of type `kind` with `message` and `fields`, whatever its constructor takes."""
    error = kind.__new__(kind)
    RuntimeError.__init__(error, message)
    error.__dict__.update(fields)
    return error


class EnvRaisedError(EnvError):
    """The env raised inside its worker. `remote_traceback` is the worker's traceback.

    Where the env's exception type is found here, the error is one of it too (`raised`),
    so `except ValueError` written for envs in this process catches it.
    """

    own_type: type | None = None  # The env's exception type, where the error is one too.

    def __init__(
        self, message: str, env: str, command: str, error_type: str, remote_traceback: str
    ):
        super().__init__(message, env, command)
        self.error_type = error_type
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple:  # Its class is made here: rebuilt from the env's type's name.
        kind = self.own_type
        named = None if kind is None else (kind.__module__, kind.__qualname__)
        return _rebuild_raised, (named, str(self), dict(self.__dict__))


class EnvAttributeError(EnvRaisedError, AttributeError):
    """The env has no such attribute: an AttributeError too, as a missing attribute is.

    So a check written for envs in this process (`hasattr`, Stable-Baselines3's
    `has_attr`, Gymnasium's wrappers) reads it as missing.
    """

    own_type = AttributeError


def _rebuild_raised(named: tuple | None, message: str, fields: dict[str, Any]) -> EnvError:
    """An EnvRaisedError unpickled: one of the env's type too where that is found here."""
    return _rebuild(raised_as(None if named is None else own_type(*named)), message, fields)


@functools.cache
def raised_as(own_type: type | None) -> type[EnvRaisedError]:
    """The error class for an env's exception of `own_type`: an EnvRaisedError and one of it.

    EnvRaisedError alone for None (not found here), one of batchrl's, or a type that
    builds fields of its own from its arguments (OSError's errno and filename).
    """
    if own_type is AttributeError:
        return EnvAttributeError
    if (
        not isinstance(own_type, type)
        or not issubclass(own_type, Exception)
        or issubclass(own_type, EnvError | OSError)
    ):
        return EnvRaisedError
    try:
        kind = type(
            EnvRaisedError.__name__,  # Named as ever in tracebacks and error lines.
            (EnvRaisedError, own_type),
            {"__module__": __name__, "own_type": own_type, "__doc__": EnvRaisedError.__doc__},
        )
        if str(kind("message", "", "", "", "")) == "message":  # Built as an EnvRaisedError.
            return kind
    except Exception:  # Bases that cannot combine, or a constructor that wants its own.
        pass
    return EnvRaisedError


def own_type(module: str, qualname: str) -> type | None:
    """The exception type a worker names, where this process has its module; else None."""
    # A worker runs the main script as __mp_main__; nothing is imported for the lookup.
    found: Any = sys.modules.get("__main__" if module == "__mp_main__" else module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def rose_at(text: str) -> str:
    """The text " at file:line" naming traceback `text`'s last frame of the user's code.

    The one line of an env's error then says where in the user's env it rose, which the
    train command's one line kept nowhere else: the last frame outside Python's library,
    installed packages and batchrl (an env's `json.loads` failing names the env's call),
    or the last frame where every frame is theirs (a Gymnasium env's own check); none
    for a check of batchrl's envs' hosts (a 4-tuple step refused), where the env returned.
    """
    frames = _FRAME.findall(text)
    own = [frame for frame in frames if not frame[0].startswith(_LIBRARIES)]
    file, line = (own or frames or [("", "")])[-1]
    # batchrl's check of what an env returned, whose words name the env: no place of it.
    checked = not own and file.startswith(str(pathlib.Path(__file__).parent))
    return f" at {file}:{line}" if file and not checked else ""


def mark_env(error: BaseException, index: int) -> None:
    """Notes on `error` the place of the env it rose in among its group's envs, once."""
    if not hasattr(error, _ENV_INDEX):
        with contextlib.suppress(AttributeError, TypeError):  # A type of no attributes.
            setattr(error, _ENV_INDEX, index)


def note_here(error: BaseException, env: str, command: str) -> None:
    """Notes on an exception of an env in this process which env raised it, and in what.

    A command says it in the line a worker's env's error has (`line_here`); the error
    itself stays the env's own, as `SyncVectorEnv` raises it.
    """
    with contextlib.suppress(AttributeError, TypeError):  # A type of no attributes.
        setattr(error, _RAISED_HERE, f"{env} during {command}")


def line_here(error: BaseException) -> str | None:
    """The one line for an exception `note_here` noted, as a worker's env's reads; else None."""
    where = getattr(error, _RAISED_HERE, None)
    if not isinstance(where, str):
        return None
    first = next((line for line in str(error).splitlines() if line.strip()), "")
    rose = rose_at("".join(traceback.format_exception(error)))
    return f"{type(error).__name__}: {first} (raised by {where}{rose})"


def marked(error: BaseException, index: int) -> BaseException:
    """`error`, marked as raised by the env at `index` of its group (`mark_env`)."""
    mark_env(error, index)
    return error


def env_index(error: BaseException) -> int | None:
    """The place `mark_env` noted on `error`; None where no env of a group raised it."""
    index = getattr(error, _ENV_INDEX, None)
    return index if isinstance(index, int) else None


def raised(
    message: str, env: str, command: str, error_type: str, text: str, kind: type | None = None
) -> EnvRaisedError:
    """The error for an env's exception of type `error_type` (`kind`, where known here)."""
    if kind is None and error_type == AttributeError.__name__:
        kind = AttributeError
    return raised_as(kind)(message, env, command, error_type, text)


class EnvCrashedError(EnvError):
    """The worker process died (killed, segfault, `os._exit`)."""


class EnvTimeoutError(EnvError):
    """The worker did not answer within its timeout; it has been killed."""

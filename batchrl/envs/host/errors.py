"""Errors an env worker can raise in the parent: the env raised, the worker died, or it hung.

They pickle with every field, so they cross processes and Ray actors as they are.
"""

from __future__ import annotations

import pathlib
import re
import sysconfig
from typing import Any

_FRAME = re.compile(r'^\s*File "(.+?)", line (\d+)', re.MULTILINE)
# Where code that is not the user's lives: Python's library, installed packages, batchrl.
_LIBRARIES = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(pathlib.Path(__file__).parents[2])}
)


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


def _rebuild(kind: type, message: str, fields: dict[str, Any]) -> EnvError:
    """An error of type `kind` with `message` and `fields`, whatever its constructor takes."""
    error = kind.__new__(kind)
    RuntimeError.__init__(error, message)
    error.__dict__.update(fields)
    return error


class EnvRaisedError(EnvError):
    """The env raised inside its worker. `remote_traceback` is the worker's traceback."""

    def __init__(
        self, message: str, env: str, command: str, error_type: str, remote_traceback: str
    ):
        super().__init__(message, env, command)
        self.error_type = error_type
        self.remote_traceback = remote_traceback


class EnvAttributeError(EnvRaisedError, AttributeError):
    """The env has no such attribute: an AttributeError too, as a missing attribute is.

    So a check written for envs in this process (`hasattr`, Stable-Baselines3's
    `has_attr`, Gymnasium's wrappers) reads it as missing.
    """


def rose_at(text: str) -> str:
    """The text " at file:line" naming traceback `text`'s last frame of the user's code.

    The one line of an env's error then says where in the user's env it rose, which the
    train command's one line kept nowhere else: the last frame outside Python's library,
    installed packages and batchrl (an env's `json.loads` failing names the env's call),
    or the last frame where every frame is theirs (a Gymnasium env's own check).
    """
    frames = _FRAME.findall(text)
    own = [frame for frame in frames if not frame[0].startswith(_LIBRARIES)]
    file, line = (own or frames or [("", "")])[-1]
    return f" at {file}:{line}" if file else ""


def raised(message: str, env: str, command: str, error_type: str, text: str) -> EnvRaisedError:
    """The error for an exception of type `error_type` raised by an env in its worker."""
    kind = EnvAttributeError if error_type == AttributeError.__name__ else EnvRaisedError
    return kind(message, env, command, error_type, text)


class EnvCrashedError(EnvError):
    """The worker process died (killed, segfault, `os._exit`)."""


class EnvTimeoutError(EnvError):
    """The worker did not answer within its timeout; it has been killed."""

"""Errors an env worker can raise in the parent: the env raised, the worker died, or it hung."""

from __future__ import annotations


class EnvError(RuntimeError):
    """A batched env failed. `env` names it; `command` is what the parent asked of it."""

    def __init__(self, message: str, env: str = "", command: str = ""):
        super().__init__(message)
        self.env = env
        self.command = command


class EnvRaisedError(EnvError):
    """The env raised inside its worker. `remote_traceback` is the worker's traceback."""

    def __init__(
        self, message: str, env: str, command: str, error_type: str, remote_traceback: str
    ):
        super().__init__(message, env, command)
        self.error_type = error_type
        self.remote_traceback = remote_traceback


class EnvCrashedError(EnvError):
    """The worker process died (killed, segfault, `os._exit`)."""


class EnvTimeoutError(EnvError):
    """The worker did not answer within its timeout; it has been killed."""

"""Env errors out of compiled code: kept by the bridge's host calls, raised as themselves.

An exception in a host callback reaches the caller of the compiled program as an opaque
JaxRuntimeError; the callback keeps the original here and `surface_errors` raises it in
its place, as it raises Ctrl-C that lands in JAX's part of a call as KeyboardInterrupt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

# How a KeyboardInterrupt raised in a host call shows in XLA's error text.
_INTERRUPTED = "KeyboardInterrupt:"
# The error of the last failed host call. Callbacks run on XLA's threads, not the caller's,
# so this is process-wide; compiled programs that drive worker envs run one at a time.
_last_error: list[BaseException | None] = [None]


def keep(error: BaseException) -> None:
    """Keeps `error`, raised by a host call, for `surface_errors` to raise."""
    _last_error[0] = error


def pending() -> bool:
    """Whether a host call's error is kept and not yet raised."""
    return _last_error[0] is not None


def take_error() -> BaseException | None:
    """The error raised by the last failed bridge call in this process, cleared once read."""
    error, _last_error[0] = _last_error[0], None
    return error


def surface_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a compiled function so an env error inside it is raised as itself.

    Without this, an exception in an env worker (crash, timeout, raised error) reaches
    the caller as a JaxRuntimeError with the message buried in text. So does Ctrl-C (or
    a signal made into KeyboardInterrupt) that lands in JAX's own part of a host call,
    around the bridge's code: it is raised as KeyboardInterrupt.
    """

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        take_error()
        try:
            result = jax.block_until_ready(function(*args, **kwargs))
        except Exception as runtime_error:
            error = take_error()
            if error is None and _INTERRUPTED in str(runtime_error):
                message = str(runtime_error).split(_INTERRUPTED, 1)[1].splitlines()[0].strip()
                raise KeyboardInterrupt(message) from None
            if error is None:
                raise
            raise error from None
        error = take_error()  # Kept by a call over several devices (see `_host_call`).
        if error is not None:
            raise error from None
        return result

    return wrapped

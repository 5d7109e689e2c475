"""MuJoCo's warnings as Python warnings: each shown once a process, and no log file.

MuJoCo prints a warning each time it meets it and appends it to MUJOCO_LOG.TXT in the
current folder. Gymnasium's HalfCheetah model sets an attribute MuJoCo 4 deprecates, so
the train command on the `cheetah` presets printed that warning 17 times before its first
phase (each of 16 worker envs and the env it checks) and left the file in the user's
folder. Workers, for their whole life, and batchrl's own env builds in the caller's
process, for their length, route MuJoCo's warnings through Python's `warnings` instead:
shown once a process by the default filter, filtered as any other (`MujocoWarning`, a
filter at the top of the main script reaches the workers too), and no file written.

MuJoCo is imported as the routing is asked for, not with batchrl: it picks its OpenGL
backend as it loads, and a `MUJOCO_GL` whose library is missing (`osmesa` on a machine
without OSMesa) failed `import batchrl`, so every command. Where MuJoCo does not load,
nothing is routed; an env that needs it says why as it is built.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_failed: list[BaseException] = []  # MuJoCo's import error, once met: not tried again.


class MujocoWarning(UserWarning):
    """A warning of MuJoCo's C library: a deprecated model attribute, an unstable simulation."""


def _warn(message: str) -> None:
    try:
        # stacklevel 2: the Python line that called into MuJoCo (a model's load, a step).
        warnings.warn(message, MujocoWarning, stacklevel=2)
    except Warning:  # A filter that makes it an error: raising through MuJoCo's C is unsafe.
        print(f"MujocoWarning: {message}", file=sys.stderr, flush=True)


def _mujoco() -> ModuleType | None:
    """The MuJoCo module, or None where it does not import (not installed, a bad MUJOCO_GL)."""
    if _failed:
        return None
    try:
        import mujoco
    except Exception as error:
        _failed.append(error)
        return None
    return mujoco


def route() -> None:
    """This process's MuJoCo warnings go through `warnings` from now on (a worker's)."""
    mujoco = _mujoco()
    if mujoco is not None:
        mujoco.set_mju_user_warning(_warn)


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """`route` for the block, then the caller's own handler (or MuJoCo's default) again."""
    mujoco = _mujoco()
    before: Any = mujoco.get_mju_user_warning() if mujoco is not None else None
    if mujoco is not None:
        mujoco.set_mju_user_warning(_warn)
    try:
        yield
    finally:
        if mujoco is not None:
            mujoco.set_mju_user_warning(before)

"""A rollout actor's answer to a Ray call, or the error that says why none came.

A segment of acting has no length a timeout could bound (its steps, an env's speed and a
first compilation vary), so a silent actor is found by a probe instead: after each
`timeout` seconds without the answer, the actor is asked in a concurrency group of its
own (`PROBE_GROUPS`), which answers while a call runs, whether it is there. An actor that
answers neither the call nor, within `timeout` more, the probe is hung: a stopped or
frozen process, which Ray still lists as alive.
"""

from __future__ import annotations

from typing import Any

from batchrl.envs.host import errors

PROBE_GROUPS = {"probe": 1}  # The actor's option `concurrency_groups`.


class HungError(Exception):
    """The actor answered neither its call nor a probe within the timeout."""


def answer(ref: Any, probe: Any, timeout: float) -> Any:
    """`ray.get(ref)`, probing the actor with `probe.remote()` after each `timeout` seconds.

    Raises `HungError` where a probe is not answered within `timeout` either; Ray's own error
    where the actor died (a probe of a dead actor fails, and `ref`'s answer says how).
    `probe` None: `ray.get(ref, timeout=timeout)`.
    """
    import ray  # Installed: the rollout actors calling here are Ray's.

    if probe is None:
        return ray.get(ref, timeout=timeout)
    while not ray.wait([ref], timeout=timeout)[0]:
        try:
            ray.get(probe.remote(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise HungError from None
        except ray.exceptions.RayError:
            return ray.get(ref)  # The actor died: its call's answer says how.
    return ray.get(ref)


def raised_in(error: Any, where: str, command: str) -> errors.EnvError:
    """The error for `command` that raised in the actor (`RayTaskError`), named `where`.

    An env error of the actor's envs with `where` added to its first line; any other of
    its own type too, as a worker's is (`errors.raised`).
    """
    cause = error.cause
    if isinstance(cause, errors.EnvError):  # A worker's: its pid is on the actor's node.
        first, newline, rest = str(cause).partition("\n")
        return errors.reworded(cause, f"{first} (in {where}){newline}{rest}")
    kind = type(cause)
    said = f"{kind.__name__}: {cause} (raised in {where} during {command})"
    said += f"\n\nIn the actor:\n{error}"
    return errors.raised(said, "rollout actor", command, kind.__name__, str(error), kind)


def hung(where: str, command: str, timeout: float, restart: bool) -> errors.EnvTimeoutError:
    """The line for a hung actor, killed."""
    said = f"{where} answered neither {command} nor a probe within {timeout:g} s and was killed"
    said += "; raise worker_timeout" + ("" if restart else " or set restart_workers=true")
    return errors.EnvTimeoutError(said, "rollout actor", command)


def lost(where: str, command: str, why: str, restart: bool) -> errors.EnvCrashedError:
    """The line for an actor that died (`why`: Ray's error, and whether its node is gone)."""
    said = f"{where} died during {command} ({why})"
    if not restart:
        said += "; set restart_workers=true to replace lost actors"
    return errors.EnvCrashedError(said, "rollout actor", command)

"""A batch's arguments checked: constructors, autoreset mode, seeds, reset masks, indices.

Each check returns the value in the one form the batch uses, or raises a one-line error
that names the bad value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import make as make_lib
from batchrl.envs.host import split

# AsyncVectorEnv's constructor arguments: the values a BatchEnv takes (it does what they
# say, or what is as good: it shares fixed-shape leaves and pipes the others, and returns
# arrays of its own each step), and what it does instead of the others.
_ASYNC_VECTOR_ENV_ONLY = {
    "shared_memory": ((True, False), ""),
    "copy": ((True, False), ""),
    "daemon": ((True,), "its workers are daemon processes, ended with it"),
    "worker": ((None,), "its workers run their own loop"),
}


def constructors(
    env: Any, num_envs: int | None, env_kwargs: dict[str, Any] | None = None
) -> list[Callable[[], gym.Env]]:
    """One constructor per env from a Gymnasium id, one constructor, or a list of them.

    `env_kwargs` go to `gym.make` with an id, as `gym.make_vec`'s do, but `wrappers`, a
    sequence of functions each env is wrapped in after `gym.make`, as `gym.make_vec`
    takes them; a constructor takes its own. Anything else (an env object, which no worker
    can build) is refused in one line.
    """
    if num_envs is not None:
        num_envs = check_num_envs(num_envs)
    if not isinstance(env, str):
        env_kwargs = _without_async_vector_env_arguments(env_kwargs or {})
    if env_kwargs and not isinstance(env, str):
        raise TypeError(
            f"keywords {sorted(env_kwargs)} go to gym.make with a Gymnasium id; a constructor "
            "takes its own (functools.partial(make, ...))"
        )
    if isinstance(env, str):
        if num_envs is None:
            raise ValueError(f"give num_envs to build a batch of {env!r}")
        env_kwargs = dict(env_kwargs or {})
        wrappers = _wrappers(env_kwargs.pop("wrappers", None))
        make_lib.check_name(env, env_kwargs, make_keywords=True)
        return [make_lib.Make(env, kwargs=env_kwargs, wrappers=wrappers)] * num_envs
    if callable(env):
        if num_envs is None:
            raise ValueError("give num_envs to build a batch from one constructor")
        return [env] * num_envs
    listed = _listed(env)
    if num_envs is not None and num_envs != len(listed):
        raise ValueError(f"num_envs={num_envs} but {len(listed)} constructors were given")
    if not listed:
        raise ValueError("a BatchEnv needs at least one env, got none")
    return listed


def _without_async_vector_env_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` less AsyncVectorEnv's arguments of values a BatchEnv takes; others refused."""
    for name in kwargs.keys() & _ASYNC_VECTOR_ENV_ONLY.keys():
        value, (taken, instead) = kwargs[name], _ASYNC_VECTOR_ENV_ONLY[name]
        if not any(value is ok for ok in taken):  # Booleans and None, by identity.
            allowed = " or ".join(f"{name}={ok!r}" for ok in taken)
            raise TypeError(
                f"AsyncVectorEnv's {name}={value!r} has no counterpart here: a BatchEnv takes "
                f"{allowed}{f' ({instead})' if instead else ''}, or none"
            )
    return {name: v for name, v in kwargs.items() if name not in _ASYNC_VECTOR_ENV_ONLY}


def _wrappers(given: Any) -> tuple[Callable[[gym.Env], gym.Env], ...]:
    """`gym.make_vec`'s `wrappers` as a tuple of callables, or a TypeError naming the bad one."""
    if given is None:
        return ()
    if callable(given) or isinstance(given, str) or not hasattr(given, "__iter__"):
        raise TypeError(f"wrappers is a sequence of functions of an env, got {given!r:.80}")
    for item in given:
        if not callable(item):
            raise TypeError(f"wrappers holds {item!r:.80}: each is a function of an env")
    return tuple(given)


def _listed(env: Any) -> list[Callable[[], gym.Env]]:
    """`env` as a list of constructors, or a TypeError naming what is not one."""
    allowed = "env must be a Gymnasium id, a constructor or a list of constructors"
    try:
        listed = [env] if isinstance(env, gym.Env) else list(env)
    except TypeError:
        raise TypeError(f"{allowed}, got {env!r:.80}") from None
    for i, item in enumerate(listed):
        if not callable(item):
            where = "" if item is env else f" in place {i} of the list"
            hint = ": batch env objects with BatchEnv.from_envs(envs)"
            hint = hint if isinstance(item, gym.Env) else ""
            raise TypeError(f"{allowed}, got {item!r:.80}{where}{hint}")
    return listed


def check_num_envs(num_envs: Any) -> int:
    """`num_envs` as an int of at least 1, or a ValueError naming it."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"num_envs must be a whole number of at least 1, got {num_envs!r}")
    return int(num_envs)


def check_threads(threads: Any) -> int | None:
    """`threads` as an int of at least 1 (None: one per core), or a ValueError naming it."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer) or threads < 1:
        raise ValueError(
            f"threads must be a whole number of at least 1 or None (one per core), got {threads!r}"
        )
    return int(threads)


def check_envs_per_worker(envs_per_worker: Any) -> int | None:
    """`envs_per_worker` as an int of at least 1 (None: the default), or a ValueError naming it."""
    if envs_per_worker is None:
        return None
    if not _whole_at_least_1(envs_per_worker):
        raise ValueError(
            f"envs_per_worker must be a whole number of at least 1, got {envs_per_worker!r}"
        )
    return int(envs_per_worker)


def check_restart(restart: Any) -> bool:
    """`restart` as a bool, or a ValueError naming it: a string such as "no" read as True."""
    if not isinstance(restart, bool | np.bool_):
        raise ValueError(f"restart must be True or False, got {restart!r}")
    return bool(restart)


def check_timeout(timeout: Any) -> float | None:
    """`timeout` as positive, finite seconds (None: no limit), or a ValueError naming it."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float | np.integer | np.floating)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return float(timeout)


def worker_sizes(
    max_concurrency: Any, envs: int, envs_per_worker: int | None, local_envs: int
) -> list[int]:
    """How many of `envs` each worker process steps, in order.

    `envs_per_worker` (default: `split`'s, by the cores) fills each worker in turn.
    `AsyncVectorEnv`'s `max_concurrency` (Gymnasium 1.4) caps the envs in `step` or `reset`
    at once; a worker steps its envs one after another, so here it is the count of workers,
    the envs shared out evenly over that many (5 envs, 4: workers of 2, 1, 1 and 1). A
    ValueError names a value that is not a whole number of at least 1, or one given beside
    `envs_per_worker` or `local_envs`.
    """
    if max_concurrency is None:
        per_worker = envs_per_worker or split.default_envs_per_worker(envs, local_envs > 0)
        return [min(per_worker, envs - start) for start in range(0, envs, per_worker)]
    if not _whole_at_least_1(max_concurrency):
        raise ValueError(
            f"max_concurrency must be a whole number of at least 1 or None, got {max_concurrency!r}"
        )
    if envs_per_worker is not None or local_envs:
        raise ValueError(
            f"max_concurrency={max_concurrency} sets how many worker processes step the envs: "
            f"give it, or envs_per_worker and local_envs, not both"
        )
    workers = min(int(max_concurrency), envs)
    return [envs // workers + (worker < envs % workers) for worker in range(workers)]


def _whole_at_least_1(value: Any) -> bool:
    """Whether `value` is an int (numpy's too, not a bool) of at least 1."""
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= 1


def check_local_envs(local_envs: int | str, num_envs: int) -> int:
    """`local_envs` as a number of envs, or a ValueError naming what is allowed."""
    if local_envs == "auto":
        return split.default_local_envs(num_envs)
    if isinstance(local_envs, bool) or not isinstance(local_envs, int | np.integer):
        raise ValueError(f"local_envs must be a number of envs or 'auto', got {local_envs!r}")
    if not 0 <= local_envs <= num_envs:
        raise ValueError(f"local_envs must be between 0 and num_envs={num_envs}, got {local_envs}")
    return int(local_envs)


def check_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """`mode` as an `AutoresetMode`; its name or value works too ("next_step", "NEXT_STEP")."""
    if isinstance(mode, AutoresetMode):
        return mode
    for known in AutoresetMode:
        if isinstance(mode, str) and mode.lower() in (known.value.lower(), known.name.lower()):
            return known
    allowed = ", ".join(m.name for m in AutoresetMode)
    raise ValueError(f"unknown autoreset_mode {mode!r}: use one of {allowed}")


def check_observation_mode(mode: Any) -> Any:
    """`mode` if it is "same", "different", or a tuple (batched space, single space).

    As `AsyncVectorEnv` takes it; anything else is refused with its words.
    """
    if isinstance(mode, tuple) and len(mode) == 2:
        if not all(isinstance(space, gym.Space) for space in mode):
            kinds = ", ".join(type(space).__name__ for space in mode)
            raise TypeError(f"Expected both elements of observation_mode to be Spaces, got {kinds}")
        return mode
    if isinstance(mode, str) and mode in ("same", "different"):
        return mode
    raise ValueError(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
        f"batch observation space, actual got {mode}"
    )


def check_seeds(seed: Any, num_envs: int) -> list[int | None]:
    """One seed per env from None, an int (env i gets seed + i) or a list of int or None."""
    allowed = "give an int, a list of one int or None per env, or None"
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(num_envs)]
    if isinstance(seed, str | bytes) or not hasattr(seed, "__iter__"):
        raise TypeError(f"reset got seed={seed!r}: {allowed}")
    seeds = list(seed)
    for one in seeds:
        if one is not None and not isinstance(one, int | np.integer):
            raise TypeError(f"reset got seed={seed!r}, whose {one!r} is not an int: {allowed}")
    if len(seeds) != num_envs:
        counted = "1 seed" if len(seeds) == 1 else f"{len(seeds)} seeds"
        raise ValueError(f"reset got {counted} for {num_envs} envs: {allowed}")
    return [None if one is None else int(one) for one in seeds]


class ResetMaskError(ValueError, AssertionError):
    """A bad reset mask: the ValueError Gymnasium 1.4 raises, the AssertionError of 1.0-1.3."""


class ResetMaskTypeError(TypeError, AssertionError):
    """A reset mask not of bools: the TypeError of Gymnasium 1.4, the AssertionError before."""


# Gymnasium 1.4 words a bad reset mask otherwise than 1.0-1.3; the batch words it as the
# installed Gymnasium does, so that code written against its vector envs reads the same.
_WORDS_OF_1_4 = tuple(int(part) for part in gym.__version__.split(".")[:2]) >= (1, 4)


def check_mask(mask: Any, num_envs: int) -> np.ndarray:
    """The indices of a reset mask, a bool array [num_envs] with at least one True.

    Refused as the installed Gymnasium's vector envs refuse it, with their words; a list
    of bools, which they refuse for not being an ndarray, is read as its array.
    """
    mask = np.asarray(mask)
    what = "`options['reset_mask']` must" if _WORDS_OF_1_4 else "`options['reset_mask': mask]` must"
    if mask.shape != (num_envs,):
        raise ResetMaskError(f"{what} have shape `({num_envs},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise ResetMaskTypeError(f"{what} have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        at_least = " with at least one True value" if _WORDS_OF_1_4 else ""
        raise ResetMaskError(f"{what} contain a boolean array{at_least}, got reset_mask={mask}")
    return np.flatnonzero(mask)


def whole_indices(indices: Any) -> np.ndarray:
    """`indices` (one or many) as int64 [k], or a TypeError naming them.

    A mask of bools is refused: read as numbers, [False, True] named envs 0 and 1.
    """
    given = np.asarray(indices).reshape(-1)
    if given.dtype == bool:
        raise TypeError(
            f"env indices are env numbers, got a mask of bools {given.tolist()!r:.80}: "
            "give np.flatnonzero(mask)"
        )
    if given.size and given.dtype.kind not in "iu":
        raise TypeError(f"env indices must be whole numbers, got {given.tolist()!r:.80}")
    return given.astype(np.int64)


def check_indices(indices: Any, num_envs: int) -> np.ndarray:
    """Distinct env indices in range as an array; all envs when None."""
    if indices is None:
        return np.arange(num_envs)
    indices = whole_indices(indices)
    bad = indices[(indices < 0) | (indices >= num_envs)]
    if len(bad):
        raise IndexError(
            f"env index {int(bad[0])} is out of range: this batch has envs 0 to {num_envs - 1}"
        )
    if len(np.unique(indices)) != len(indices):
        raise ValueError(f"env indices must be distinct, got {indices.tolist()}")
    return indices


def check_flat_actions(actions: Any, space: gym.Space, num_envs: int) -> np.ndarray:
    """A batch's actions of a flat `space` as one array [num_envs, *shape], or Gymnasium's error.

    A scalar is a TypeError (it cannot be split among envs), a wrong shape a ValueError.
    """
    actions, expected = np.asarray(actions), (num_envs, *space.shape)
    if actions.ndim == 0:
        raise TypeError(
            f"actions must be a batch of shape {expected}, one per env, got the "
            f"scalar {actions!r:.40}"
        )
    if actions.shape != expected:
        raise ValueError(
            f"actions of shape {actions.shape} do not fit this batch: expected "
            f"{expected} ({num_envs} envs, action shape {space.shape})"
        )
    return actions

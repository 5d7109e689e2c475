"""Each env's Gymnasium seed in a run: drawn from the run's seed, never the seed plus i."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """The Gymnasium seed of each of `num_envs` envs in a run seeded `seed`.

    Drawn from `seed`, not seed + i: with seed + i, env i + 1 of one run is env i of the
    next seed's run, and on a task whose episodes never end early (Reacher) the two
    train and evaluate on the same starts (ten held-out Reacher runs' final evaluations
    saw 68 distinct starts, not 320, and read 0.40 high).
    """
    if seed < 0:
        raise ValueError(f"seed must be at least 0, got {seed}")
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs)]


def run_env_seeds(seed: int | Sequence[int], num_envs: int) -> list[int]:
    """`env_seeds` of one run's seed, or of R runs' seeds sharing `num_envs` in equal parts."""
    if isinstance(seed, int):
        return env_seeds(seed, num_envs)
    runs = len(seed)
    if not runs or num_envs % runs:
        raise ValueError(f"{num_envs} envs do not split into equal parts for seeds {list(seed)}")
    return [one for run in seed for one in env_seeds(run, num_envs // runs)]


def check_env_seeds(env_seeds: Sequence[int] | None, num_envs: int) -> list[int] | None:
    """`env_seeds` as a list of one seed an env; None where none were given.

    A ValueError in one line names a count that is not `num_envs`.
    """
    if env_seeds is None:
        return None
    given = [int(seed) for seed in env_seeds]
    if len(given) != num_envs:
        raise ValueError(f"env_seeds holds {len(given)} seeds for {num_envs} envs: give one an env")
    return given


def resumed_env_seeds(env_seeds: Sequence[int], phase: int) -> list[int]:
    """Seeds for envs a run resumed after `phase` restarts: each env's seed mixed with it.

    Restarted unseeded, envs built as at the run's start began its first episodes again.
    """
    return [int(np.random.SeedSequence([seed, phase]).generate_state(1)[0]) for seed in env_seeds]

"""What a `TrainConfig` refuses: one-line ValueErrors naming the value and what is allowed.

Checked as the config is made (`TrainConfig.__post_init__`), so a bad setting stops the
command before any folder, worker or compile; the env settings each backend refuses
are `backends.check`'s, the algorithm's own `ppo.config`'s. What a config may ask but
a run says in a warning is here too (`split_rollouts`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from batchrl.configs import backends
from batchrl.ppo import config as ppo_config

# A device as `device` and `acting_device` name one: "auto", or a JAX platform with an
# optional index ("cpu", "gpu", "gpu:1"; "cuda" is "gpu", as SB3 and torch spell it).
DEVICE_KINDS = ("auto", "cpu", "gpu", "cuda", "tpu")
_DEVICE = re.compile(r"(cpu|gpu|cuda|tpu)(:\d+)?|auto")
OVERLAP = ("auto", "on", "off")  # The values of `overlap`.


def check(config: Any) -> None:
    """A one-line ValueError for the first setting of `config` out of range or out of place."""
    if not isinstance(config.algorithm, ppo_config.Common):
        raise ValueError(
            f"algorithm must be a PenaltyConfig or ClippedConfig, got {config.algorithm!r}"
        )
    for name in ("steps", "num_envs", "max_length"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")
    # The compiled run holds these as int32: JAX's default integers.
    if not 0 <= config.seed < 2**31:
        raise ValueError(f"seed must be in [0, 2**31), got {config.seed}")
    for owner in (config, config.algorithm):  # Every count: update_epochs=3e9 too.
        for field in dataclasses.fields(owner):
            value = getattr(owner, field.name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 2**31:
                said = f"{field.name} must be below 2**31 (2,147,483,648), got {value:,}"
                raise ValueError(said)
    for field in dataclasses.fields(config.algorithm):  # NaN passes every comparison.
        value = getattr(config.algorithm, field.name)
        if isinstance(value, float) and math.isnan(value):
            raise ValueError(f"{field.name} must be a number, got nan")
    config.algorithm.check(config.shape)
    if config.local_envs > config.num_envs:
        raise ValueError(
            f"local_envs must be at most num_envs={config.num_envs}, got {config.local_envs}"
        )
    # A count's own range first: action_repeat=0 was refused as needing another backend.
    names = ("eval_episodes", "eval_every", "final_episodes", "checkpoint_every")
    for name in (*names, "action_repeat", "keep_checkpoints", "average_last"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")
    backends.check(config)
    for name in ("device", "acting_device"):
        if not _DEVICE.fullmatch(getattr(config, name)):
            raise ValueError(
                f"unknown {name} {getattr(config, name)!r}: use one of {DEVICE_KINDS}, "
                f"or one of those platforms' devices by its index from 0, such as 'gpu:1'"
            )
    if config.overlap not in OVERLAP:
        raise ValueError(f"unknown overlap {config.overlap!r}: use one of {OVERLAP}")
    if config.average_last > 1 and (
        config.checkpoint_every != 1 or config.keep_checkpoints < config.average_last
    ):
        raise ValueError(
            f"average_last={config.average_last} needs checkpoint_every=1 and "
            f"keep_checkpoints>={config.average_last} (got {config.checkpoint_every} and "
            f"{config.keep_checkpoints}), so a resumed run finds the phases it averages"
        )
    names = ("phase_steps", "envs_per_worker", "local_envs", "ray_actors", "env_threads")
    for name in (*names, "rollout_actors", "learner_cores"):
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must be 0 or more, got {getattr(config, name)}")
    if config.ray_actors > config.num_envs:  # Named as BatchEnv.ray's `actors` at its start.
        raise ValueError(
            f"ray_actors must be at most num_envs={config.num_envs}, got {config.ray_actors}"
        )
    if config.rollout_actors:
        backends.check_rollout_actors(config)


def split_rollouts(config: Any) -> str | None:
    """The warning for clipped phases that are no whole number of rollouts, or None.

    Allowed, but said: raising `num_envs` on a preset whose `phase_steps` is fixed gave
    `cheetah_clipped` on 256 envs phases of 80 batch steps and rollouts of 128, every
    third phase training nothing and each checkpoint holding a part-filled rollout.
    """
    algorithm = config.algorithm
    if not isinstance(algorithm, ppo_config.ClippedConfig) or not config.phase_steps:
        return None
    steps, rollout = config.batch_steps_per_phase, algorithm.steps_per_update
    if steps % rollout == 0:
        return None
    whole = max(steps // rollout, 1) * rollout * config.num_envs
    return (
        f"phase_steps={config.phase_steps:,} on {config.num_envs} envs is {steps} batch steps a "
        f"phase, no whole number of rollouts of steps_per_update={rollout}: some phases train "
        f"no update and checkpoints hold a part-filled rollout (phase_steps={whole:,} is whole)"
    )

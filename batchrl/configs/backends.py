"""Backends: where a run's envs run, the old settings `backend` replaced, what each refuses.

`env_kind` ("workers", "jax", "gymnax") and `env_backend` (the Gymnasium backends) crossed:
`env_kind=workers` with `env_backend=mujoco` ran no worker. Users' scripts and run folders
written before still name them; `backend_of` says which backend they mean.
"""

from __future__ import annotations

import math
import re
from typing import Any

from batchrl.ppo import config as ppo_config

# Where a run's envs run: Gymnasium envs in worker processes, on a Ray cluster, MuJoCo
# tasks in C threads, Atari games in C++ threads; JAX-native envs of our own or gymnax's.
BACKENDS = ("processes", "ray", "mujoco", "ale", "jax", "gymnax")
JAX_NATIVE = ("jax", "gymnax")  # The backends whose envs are XLA code.
# The backends that step their envs in threads of this process, built by name.
IN_PROCESS = ("mujoco", "ale")
# Settings that `backend` replaced: each old value's backend ("workers" keeps a Gymnasium
# backend as it was). Run folders written with them read back as `backend`.
DEPRECATED = ("env_kind", "env_backend")
_ALE_ID = re.compile(r"ALE/\w+-v5")  # The ids backend "ale" takes.
WORKER_TIMEOUT = 60.0  # `worker_timeout`'s default: `envs.host.lifecycle.DEFAULT_TIMEOUT`.


def backend_of(name: str, value: str, backend: str = "processes") -> str:
    """The `backend` that deprecated setting `name`'s `value` means, on a run of `backend`.

    `env_kind` "jax" and "gymnax" are backends of their own, and "workers" any Gymnasium
    one; `env_backend` named the Gymnasium backends, and left JAX-native runs as they were.
    """
    gymnasium = tuple(b for b in BACKENDS if b not in JAX_NATIVE)
    if name == "env_kind" and value in JAX_NATIVE:
        return value
    if name == "env_kind" and value == "workers":
        return backend if backend in gymnasium else "processes"
    if name == "env_backend" and value in gymnasium:
        return backend if value == "processes" and backend in JAX_NATIVE else value
    allowed = (*JAX_NATIVE, "workers") if name == "env_kind" else gymnasium
    raise ValueError(
        f"unknown {name} {value!r}: use one of {allowed}, or backend, which replaces it"
    )


def check(config: Any) -> None:
    """A one-line ValueError for `config`'s env settings its backend cannot run."""
    if config.backend not in BACKENDS:
        raise ValueError(f"unknown backend {config.backend!r}: use one of {BACKENDS}")
    if config.backend == "ray" and config.local_envs:
        raise ValueError(f"backend='ray' needs local_envs=0, got {config.local_envs}")
    if config.backend in IN_PROCESS:
        check_in_process(config)
    elif config.env_threads:
        raise ValueError(
            f"env_threads={config.env_threads} needs backend='mujoco' or 'ale', "
            f"got {config.backend!r}"
        )
    check_worker_timeout(config.worker_timeout)
    restarted = ("processes", "ray") if not config.rollout_actors else BACKENDS
    if config.restart_workers and config.backend not in restarted:
        raise ValueError(
            f"restart_workers=True needs backend='processes' or 'ray', got {config.backend!r}"
        )
    if config.action_repeat != 1 and config.backend not in ("processes", "ray"):
        raise ValueError(
            f"action_repeat={config.action_repeat} needs backend='processes' or 'ray', "
            f"got {config.backend!r}"
        )


def check_rollout_actors(config: Any) -> None:
    """What rollout actors cannot honour in a `TrainConfig`, named in a one-line ValueError."""
    actors = config.rollout_actors
    if actors > config.num_envs:
        raise ValueError(f"rollout_actors must be at most num_envs={config.num_envs}, got {actors}")
    if getattr(config.algorithm, "recurrent", False):  # Else told to switch, then refused.
        raise ValueError(
            f"rollout_actors={actors} does not train a recurrent policy, which the kl_penalty "
            "objective alone has: train it on Ray's env actors (ray_actors) or local envs"
        )
    if not isinstance(config.algorithm, ppo_config.ClippedConfig):
        raise ValueError(
            f"rollout_actors={actors} needs objective=clipped: the kl_penalty objective's "
            f"episode memory fills at a step that every env's episodes decide together"
        )
    if config.algorithm.normalizer_updates == "step":
        raise ValueError(
            f"rollout_actors={actors} needs normalizer_updates='segment' (or 'auto'): "
            f"updated every step, acting's normalisers would read every actor's observations"
        )
    smallest = config.num_envs // actors
    if config.local_envs > smallest:  # Each actor steps that many of its envs itself.
        raise ValueError(
            f"local_envs counts each rollout actor's envs stepped in its own process: at most "
            f"{smallest} with num_envs={config.num_envs} over {actors} actors, "
            f"got {config.local_envs}"
        )
    if config.algorithm.learner_devices != 1:
        raise ValueError(
            f"rollout_actors={actors} needs learner_devices=1, "
            f"got {config.algorithm.learner_devices}"
        )


def check_worker_timeout(seconds: Any) -> None:
    """Raises a one-line ValueError unless `seconds` is a positive, finite number."""
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if not (number and 0 < seconds < math.inf):
        raise ValueError(
            f"worker_timeout must be a positive, finite number of seconds, got {seconds!r}"
        )


def check_in_process(config: Any) -> None:
    """The settings backend 'mujoco' or 'ale' cannot honour, named in a one-line ValueError."""
    backend = config.backend
    if backend == "ale" and not _ALE_ID.fullmatch(config.env):
        raise ValueError(f"backend='ale' needs an ALE/<Game>-v5 id, got env={config.env!r}")
    if backend == "ale" and config.algorithm.learner_devices != 1:
        raise ValueError(
            f"backend='ale' steps its games from a program on one device: "
            f"learner_devices must be 1, got {config.algorithm.learner_devices}"
        )
    refused = {
        "action_repeat": (config.action_repeat, 1),
        "local_envs": (config.local_envs, 0),
        "envs_per_worker": (config.envs_per_worker, 0),
        "restart_workers": (config.restart_workers, False),
    }
    for name, (value, allowed) in refused.items():
        if value != allowed:
            raise ValueError(f"backend={backend!r} needs {name}={allowed!r}, got {value!r}")


def unused(config: Any) -> list[str]:
    """A line for each setting `config` gives that its backend never reads.

    Accepted, so that a script may set them across presets of several backends, but
    said: `local_envs=4` on JAX-native envs changes nothing a user would expect.
    """
    lines = []
    if config.backend in JAX_NATIVE:
        for name in ("local_envs", "envs_per_worker"):
            if getattr(config, name):
                lines.append(
                    f"{name}={getattr(config, name)} is not used by backend={config.backend!r}: "
                    "its envs are XLA code compiled with the agent, in no worker"
                )
    if config.backend not in ("processes", "ray") and config.worker_timeout != WORKER_TIMEOUT:
        lines.append(
            f"worker_timeout={config.worker_timeout} is not used by backend={config.backend!r}: "
            "its envs run in no worker"
        )
    if config.rollout_actors and config.acting_device != "auto":
        lines.append(
            f"acting_device={config.acting_device!r} is not used with rollout_actors="
            f"{config.rollout_actors}: each actor acts on its own node's device"
        )
    if config.ray_actors and config.rollout_actors:
        lines.append(
            f"ray_actors={config.ray_actors} is not used with rollout_actors="
            f"{config.rollout_actors}: those actors hold the envs"
        )
    elif config.ray_actors and config.backend != "ray":
        lines.append(
            f"ray_actors={config.ray_actors} is not used by backend={config.backend!r}: "
            "only backend='ray' puts envs in Ray actors"
        )
    return lines


def evaluation_shares_envs(config: Any) -> bool:
    """Whether evaluation steps the training envs: host envs, but Atari's, have no others.

    The train phase after an evaluation restarts them, cutting training's episodes.
    """
    return config.backend not in JAX_NATIVE and config.backend != "ale"


def episodes_cut_short(config: Any) -> list[str]:
    """A line, as `unused`'s, where evaluation restarts shared envs before episodes can end.

    Evaluations `eval_every` phases of `batch_steps_per_phase` apart, below `max_length`:
    a phase_steps under num_envs (7 on 30 envs: phases of one batch step) trained
    Pendulum's penalty objective on cut fragments, no episode ever ending.
    """
    span = config.batch_steps_per_phase * config.eval_every
    longest = math.ceil(config.max_length / config.action_repeat)  # In the policy's steps.
    if not evaluation_shares_envs(config) or span >= longest:
        return []
    if config.phases <= config.eval_every:  # No evaluation before the last phase.
        return []
    return [
        f"evaluation every {config.eval_every} phase(s) of {config.batch_steps_per_phase} batch "
        f"step(s) (phase_steps={config.phase_steps} on num_envs={config.num_envs}) restarts "
        f"the envs it shares with training, so no training episode runs past batch step "
        f"{span} of max_length={config.max_length}: raise phase_steps or eval_every"
    ]

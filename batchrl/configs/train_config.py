"""TrainConfig: a training run's own settings and its algorithm's config, read and written as data.

The run's fields (seed, budget, env and its batch, phases, evaluation, checkpoints, env
backend) sit beside `algorithm`, a `PenaltyConfig` or a `ClippedConfig`, whose type
picks the objective and which holds only what the objective sets.
Every field can be set by name (`replace`, and `--set key=value` through `overrides`);
`objective=clipped` changes the algorithm's type, keeping the settings both share.
YAML holds the algorithm under `algorithm:` with its `objective`, and is read back
typed, so reading a run folder never executes code; a setting missing from it takes its
default.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from collections.abc import Iterable
from typing import Any

from batchrl.configs import backends, config_checks, peer_names
from batchrl.ppo import config as ppo_config
from batchrl.setting_types import read_fields, type_of, typed

logger = logging.getLogger("batchrl.configs")

_PREFIX = "algorithm."

# Settings a resume gives anew, and that runs of one config may differ in: how the run
# meets a hung or crashed worker, not what it learns while none does (the errors that stop
# a run name them: "raise the timeout", "restart_workers=true"), and where it runs (a run
# begun on a GPU goes on where there is none: `device=cpu`, as the missing GPU's error
# advises; one that split its minibatches over devices goes on with fewer, equal within
# float error). Every other setting must be the saved one.
RESUME_MAY_CHANGE = (
    "worker_timeout",
    "restart_workers",
    "device",
    "acting_device",
    "learner_devices",
    "learner_cores",
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A training run: the env, its budget split in phases, evaluation, and the algorithm."""

    algorithm: ppo_config.Config = dataclasses.field(default_factory=ppo_config.PenaltyConfig)
    seed: int = 0  # Seeds the agent, and each env of a batch (`bridge.seeds.env_seeds`).
    steps: int = 1_000_000  # Env steps of training; the horizon of a decaying learning rate.
    env: str = "Pendulum-v1"  # A Gymnasium id or a `module:Class` entry point.
    num_envs: int = 30  # Envs stepped together: the batch.
    max_length: int = 1000  # Env steps an episode may last, at most.
    # Keywords of the env's constructor, as gym.make(env, **env_kwargs); Gymnasium envs only.
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    action_repeat: int = 1  # Gymnasium envs: each action held this many env steps.
    phase_steps: int = 0  # Env steps per train phase; 0: enough for one update.
    eval_episodes: int = 30  # At least this many episodes per evaluation.
    eval_every: int = 10  # Train phases between evaluations; the last phase always evaluates.
    final_episodes: int = 10  # At least this many episodes evaluate the final policy.
    # Evaluation (every one of the run's, `evaluate`'s, `visualize`'s) samples actions from
    # the policy, as training does, instead of taking its mean action (the mode).
    eval_sample: bool = False
    envs_per_worker: int = 0  # 0: one worker per core (of each node, with Ray).
    local_envs: int = 0  # Envs stepped in the trainer's process beside workers; no restart.
    # Replace a crashed or hung env worker, or a lost rollout actor; its episodes end truncated.
    restart_workers: bool = False
    # Seconds an env worker (or Ray actor's) may take to answer a call before it counts as
    # hung and is killed (or replaced); `BatchEnv.external`'s `timeout`.
    worker_timeout: float = backends.WORKER_TIMEOUT
    # Where the envs run. Gymnasium envs: "processes" on this machine, "ray" on the Ray
    # cluster of RAY_ADDRESS (or a local one), split over `ray_actors` actors (0: one per
    # node), "mujoco": a v5 MuJoCo task's envs as one mujoco.batch in C threads
    # (BatchEnv.mujoco), or "ale": an ALE/<Game>-v5 game's envs as ale-py's vector env in
    # C++ threads (BatchEnv.atari, env_kwargs its options), stepped from the compiled
    # program by ale-py's XLA calls (bridge.ale_ffi); evaluation plays whole games on envs
    # of its own, their rewards unclipped. JAX-native envs: "jax" (ours, `envs.jax`) or
    # "gymnax" (gymnax's), compiled with the agent.
    backend: str = "processes"
    ray_actors: int = 0
    # N: N Ray actors over the cluster's nodes, each acting on its share of the envs
    # (`backend`'s; "ray": workers on its node; `local_envs` a share's in the actor's
    # process) and returning whole segments (`training.rollout_actors`). 0: none.
    rollout_actors: int = 0
    # backend "mujoco" or "ale": the batch's threads; 0: one per core this process may run on.
    env_threads: int = 0
    # XLA's threads in this process (the learner's; acting's too where it acts here) kept
    # to the first N cores it may run on, leaving the rest to env workers and rollout
    # actors on this machine (`bridge.xla_threads.keep_to`); 0: every core.
    learner_cores: int = 0
    # Where the learner runs (updates, the optimiser, the rollout it trains on): "auto" is
    # JAX's default device (a GPU where JAX has one, else the CPU); "cpu", "gpu" or one
    # device of them ("gpu:1"), as SB3's `device`.
    device: str = "auto"
    # Where acting runs (the policy's forward pass and the env step, one program): "auto"
    # picks by env kind (`training.placement`: JAX-native envs on the learner's device,
    # host envs on the CPU), or a device named as `device` names one.
    acting_device: str = "auto"
    # Acting goes on while the learner trains, one policy version behind
    # (`training.overlap`): "on", "off", or "auto": on where host envs act on the CPU
    # and the learner runs on an accelerator, and with rollout actors.
    overlap: str = "auto"
    checkpoint_every: int = 1  # Phases between checkpoints.
    keep_checkpoints: int = 3
    # The final policy's parameters: the mean of those the last `average_last` phases
    # ended with (`training.tail_average`); 1: the last phase's own.
    average_last: int = 1

    def __post_init__(self):
        if isinstance(self.algorithm, ppo_config.Common):  # Else `config_checks` names it.
            read_fields(self, skip=("algorithm",))
        config_checks.check(self)

    @property
    def jax_native(self) -> bool:
        """The envs are JAX-native (XLA code compiled with the agent), not Gymnasium's."""
        return self.backend in backends.JAX_NATIVE

    @property
    def trained_algorithm(self) -> ppo_config.Config:
        """`algorithm` as this run trains it: its `normalizer_updates` "auto" decided."""
        auto = "segment" if self.rollout_actors else "step"
        updates = self.algorithm.normalizer_updates.replace("auto", auto)
        return dataclasses.replace(self.algorithm, normalizer_updates=updates)

    @property
    def shape(self) -> ppo_config.RunShape:
        """What the objective reads of this run; its schedules' horizon is what it trains.

        The run trains whole phases, `steps` rounded up: a horizon of `steps` left the
        learning rate at zero past it (`--set steps=3000` on `cheetah_clipped`, whose phase is
        20,480 env steps: 136 of its 160 updates moved nothing).
        """
        trained = self.phases * self.batch_steps_per_phase * self.num_envs
        return ppo_config.RunShape(self.num_envs, self.max_length, trained)

    @property
    def batch_steps_per_phase(self) -> int:
        """Batch steps (each steps every env once) of one train phase."""
        algorithm = self.algorithm
        if self.phase_steps:
            return max(1, math.ceil(self.phase_steps / self.num_envs))
        if isinstance(algorithm, ppo_config.ClippedConfig):
            return algorithm.steps_per_update
        # Long enough for every env to end episodes of max_length until the memory holds
        # update_every of them: a phase of update_every * max_length env steps had too few
        # when num_envs did not divide update_every (16 envs on pendulum_jax ended 16 of 30
        # episodes, and a short run trained nothing), and none with more envs than that.
        return math.ceil(algorithm.update_every / self.num_envs) * self.max_length

    @property
    def eval_batch_steps(self) -> int:
        """Batch steps an eval round may take: time for every env to end one episode."""
        return self.max_length

    @property
    def phases(self) -> int:
        """Train phases in the whole budget."""
        per_phase = self.batch_steps_per_phase * self.num_envs
        return math.ceil(self.steps / per_phase)


def _run_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig) if f.name != "algorithm"}


def _fields(kind: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(kind)}


def _all_keys() -> set[str]:
    keys = set(_run_fields()) | {"objective"}
    for kind in ppo_config.OBJECTIVES.values():
        keys |= set(_fields(kind))
    return keys


def is_key(name: str) -> bool:
    """Whether `name` is a key `--set` takes, for some objective (`algorithm.` prefix too)."""
    return bare_key(name) in _all_keys()


def _with_objective(config: TrainConfig, objective: str) -> TrainConfig:
    """`config` with an algorithm of `objective`'s type, keeping the settings both share."""
    if objective not in ppo_config.OBJECTIVES:
        allowed = tuple(ppo_config.OBJECTIVES)
        raise ValueError(f"unknown objective {objective!r}: use one of {allowed}")
    kind = ppo_config.OBJECTIVES[objective]
    if isinstance(config.algorithm, kind):
        return config
    if config.algorithm.recurrent and "recurrent" not in _fields(kind):  # Not dropped unsaid.
        raise ValueError(
            f"recurrent=True is a setting of objective {config.algorithm.objective!r}: "
            f"objective={objective} trains no recurrent policy (drop one of them)"
        )
    shared = {
        f.name: getattr(config.algorithm, f.name) for f in dataclasses.fields(ppo_config.Common)
    }
    old, default = config.algorithm, type(config.algorithm)()
    dropped = [
        f"{name}={getattr(old, name)!r}"
        for name in _fields(type(old))
        if name not in shared and getattr(old, name) != getattr(default, name)
    ]
    if dropped:  # A `*_clipped` preset's schedule went without a word.
        logger.warning(
            "objective=%s drops settings only objective %r has: %s",
            objective,
            old.objective,
            ", ".join(dropped),
        )
    return dataclasses.replace(config, algorithm=kind(**shared))


def _check_key(name: str, algorithm: ppo_config.Common) -> None:
    """Raises the one-line ValueError for a key that is neither the run's nor `algorithm`'s."""
    bare = bare_key(name)
    listed = "python -m batchrl.scripts.train --list-keys lists them"  # Also from Python.
    peer = peer_names.hint(bare)  # Before the other objective's: batch_size means otherwise.
    if peer is not None:
        raise ValueError(f"unknown config key {name!r}{peer} ({listed})")
    for other, other_kind in ppo_config.OBJECTIVES.items():
        if bare in _fields(other_kind) and not isinstance(algorithm, other_kind):
            raise ValueError(
                f"{bare} is a setting of objective {other!r}, but this config's objective is "
                f"{algorithm.objective!r} (set objective={other} first)"
            )
    close = difflib.get_close_matches(bare.lower(), _all_keys(), n=1)  # STEPS: steps.
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown config key {name!r}{hint} ({listed})")


def bare_key(name: str) -> str:
    """`name` without its `algorithm.` prefix."""
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else name


def set_field(config: TrainConfig, name: str, value: Any, parse: Any) -> TrainConfig:
    """`config` with `name` (a field of the run or its algorithm) set by `parse(name, kind, v)`."""
    bare = bare_key(name)
    if bare == "objective":  # Read as every string setting is (`--set 'objective="clipped"'`).
        return _with_objective(config, parse(bare, str, value))
    if name in backends.DEPRECATED:
        value = parse(name, str, value)
        backend = backends.backend_of(name, value, config.backend)
        logger.warning("%s=%s is deprecated: set backend=%s instead", name, value, backend)
        return dataclasses.replace(config, backend=backend)
    if name == bare and name in _run_fields():
        return dataclasses.replace(config, **{name: parse(name, type_of(TrainConfig, name), value)})
    algorithm = config.algorithm
    kind = type(algorithm)
    if bare not in _fields(kind):
        _check_key(name, algorithm)
    typed = parse(bare, type_of(kind, bare), value)
    return dataclasses.replace(config, algorithm=dataclasses.replace(algorithm, **{bare: typed}))


def set_fields(config: TrainConfig, settings: Iterable[tuple[str, Any]], parse: Any) -> TrainConfig:
    """`config` with every (name, value) of `settings` set as `set_field` sets one.

    Checked once, all applied: settings that constrain each other (num_envs,
    steps_per_update, num_minibatches) hold in any order, not checked one by one against
    the defaults of those given after. The objective comes first, so its own settings
    apply to it. A name given twice keeps its last value, as a command line's flags do:
    `--set $DEFAULTS --set steps=N` overrides a list of settings.
    """
    settings = list(settings)
    objective = [item for item in settings if bare_key(item[0]) == "objective"][-1:]
    settings = objective + [item for item in settings if bare_key(item[0]) != "objective"]
    runs: dict[str, Any] = {}
    algorithm: dict[str, Any] = {}
    for name, value in settings:
        bare = bare_key(name)
        if bare == "objective" or name in backends.DEPRECATED:
            config = set_field(dataclasses.replace(config, **runs), name, value, parse)
            runs = {}
        elif name == bare and name in _run_fields():
            runs[name] = parse(name, type_of(TrainConfig, name), value)
        elif bare in _fields(type(config.algorithm)):
            algorithm[bare] = parse(bare, type_of(type(config.algorithm), bare), value)
        else:
            _check_key(name, config.algorithm)
    if algorithm:
        runs["algorithm"] = dataclasses.replace(config.algorithm, **algorithm)
    return dataclasses.replace(config, **runs) if runs else config


def say_dropped_env_kwargs(before: TrainConfig, after: TrainConfig) -> None:
    """A one-line warning when a user's `env_kwargs` left out keywords the config had.

    The setting replaces the whole mapping: `env_kwargs={frameskip: 2}` on an Atari preset
    silently brought back sticky actions and per-game episodes.
    """
    dropped = {k: v for k, v in before.env_kwargs.items() if k not in after.env_kwargs}
    if dropped and after.env_kwargs != before.env_kwargs:
        listed = ", ".join(f"{key}: {value!r}" for key, value in dropped.items())
        logger.warning(
            "env_kwargs replaces the config's whole mapping, dropping {%s}: give them "
            "too to keep them",
            listed,
        )


def replace(config: TrainConfig, **fields: Any) -> TrainConfig:
    """`config` with typed values set, each a field of the run or of its algorithm."""
    return set_fields(config, fields.items(), lambda _name, _kind, value: value)


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain data (str, int, float, bool, None, lists) for YAML; the algorithm nested."""

    def plain(record: Any) -> dict[str, Any]:
        return {
            f.name: _plain(getattr(record, f.name))
            for f in dataclasses.fields(record)
            if f.name != "algorithm"
        }

    algorithm = {"objective": config.algorithm.objective, **plain(config.algorithm)}
    return {"algorithm": algorithm, **plain(config)}


def _plain(value: Any) -> Any:
    """`value` as YAML writes it back the same: tuples as lists, mappings copied."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def flat(config: TrainConfig) -> dict[str, Any]:
    """Every setting by its name, the algorithm's beside the run's: for comparing configs."""
    data = to_dict(config)
    return {**{k: v for k, v in data.items() if k != "algorithm"}, **data["algorithm"]}


# Settings that were the algorithm's before the run took them over; run folders written
# then keep them under `algorithm:` and read back the same.
_MOVED = ("seed", "steps", "num_agents", "max_length")


def _read_moved(nested: dict[str, Any], data: dict[str, Any]) -> None:
    """Moves `_MOVED` settings found under `algorithm:` up to the run, in place."""
    for name in _MOVED:
        if name in nested:
            value = nested.pop(name)
            if data.setdefault(name, value) != value:
                raise ValueError(f"{name} is given twice, as {data[name]!r} and {value!r}")
    if nested.get("objective") == ppo_config.ClippedConfig.objective and not nested.get(
        "recurrent", True
    ):
        del nested["recurrent"]  # The clipped objective has no recurrent setting now.


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from plain data (as read from YAML); bad keys or values: one-line errors."""
    if not isinstance(data, dict):
        raise ValueError(f"a config must be a mapping of settings, got {type(data).__name__}")
    data = dict(data)
    nested = data.pop("algorithm", {})
    if not isinstance(nested, dict):
        raise ValueError(f"algorithm must be a mapping of settings, got {nested!r}")
    nested = dict(nested)
    _read_moved(nested, data)
    if "num_agents" in data:  # Run folders written before num_envs named it num_agents.
        data["num_envs"] = data.pop("num_agents")
    if any(name in data for name in backends.DEPRECATED):  # A run folder written before `backend`.
        backend = data.get("backend", "processes")
        kind, where = data.pop("env_kind", "workers"), data.pop("env_backend", "processes")
        backend = backends.backend_of("env_kind", typed("env_kind", str, kind), backend)
        data["backend"] = backends.backend_of(
            "env_backend", typed("env_backend", str, where), backend
        )
    config = _with_objective(TrainConfig(), nested.pop("objective", "kl_penalty"))
    algorithm = {}
    kind = type(config.algorithm)
    for name, value in nested.items():
        if name not in _fields(kind):
            _check_key(f"{_PREFIX}{name}", config.algorithm)
        algorithm[name] = typed(name, type_of(kind, name), value)
    run = {}
    for name, value in data.items():
        if name not in _run_fields():
            if name in _all_keys():
                raise ValueError(f"{name} is a setting of the algorithm: put it under 'algorithm:'")
            _check_key(name, config.algorithm)
        run[name] = typed(name, type_of(TrainConfig, name), value)
    return TrainConfig(algorithm=kind(**algorithm), **run)

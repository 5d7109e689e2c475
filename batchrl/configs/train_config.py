"""TrainConfig: the PPO config plus what a training run needs, read and written as plain data.

Every field can be set from the command line as `key=value`, parsed by the field's type;
an unknown key or a badly typed value is a one-line error. Configs go to YAML as plain
values, so reading a run folder never executes code.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any

from batchrl.ppo import config as ppo_config

ENV_KINDS = ("workers", "jax", "gymnax")
ENV_BACKENDS = ("processes", "ray")


@dataclasses.dataclass(frozen=True)
class TrainConfig(ppo_config.Config):
    """A training run: the env, its budget and phases, and every PPO setting."""

    env: str = "Pendulum-v1"  # A Gymnasium id or a `module:Class` entry point.
    env_kind: str = "workers"  # "workers": Gymnasium envs in processes; "jax": JAX-native.
    action_repeat: int = 1  # Gymnasium envs: each action held this many env steps.
    phase_steps: int = 0  # Env steps per train phase; 0: one update's worth.
    eval_episodes: int = 30  # Episodes per evaluation phase (mean action).
    eval_every: int = 10  # Train phases between evaluations; the last phase always evaluates.
    final_episodes: int = 10  # At least this many episodes evaluate the final policy.
    envs_per_worker: int = 0  # 0: one worker per core (of each node, with Ray).
    local_envs: int = 0  # Envs stepped in the trainer's process beside workers; no restart.
    # Where worker envs run: "processes" on this machine, "ray" on the Ray cluster of
    # RAY_ADDRESS (or a local one), split over `ray_actors` actors (0: one per node).
    env_backend: str = "processes"
    ray_actors: int = 0
    checkpoint_every: int = 1  # Phases between checkpoints.
    keep_checkpoints: int = 3

    def __post_init__(self):
        super().__post_init__()
        if self.local_envs > self.num_agents:
            raise ValueError(
                f"local_envs must be at most num_agents={self.num_agents}, got {self.local_envs}"
            )
        if self.env_kind not in ENV_KINDS:
            raise ValueError(f"unknown env_kind {self.env_kind!r}: use one of {ENV_KINDS}")
        if self.env_backend not in ENV_BACKENDS:
            raise ValueError(f"unknown env_backend {self.env_backend!r}: use one of {ENV_BACKENDS}")
        if self.env_backend == "ray" and (self.env_kind != "workers" or self.local_envs):
            raise ValueError("env_backend='ray' needs env_kind='workers' and local_envs=0")
        if self.action_repeat != 1 and self.env_kind != "workers":
            raise ValueError(f"action_repeat={self.action_repeat} needs env_kind='workers'")
        names = ("steps", "eval_episodes", "eval_every", "final_episodes", "checkpoint_every")
        names += ("action_repeat",)
        for name in (*names, "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("phase_steps", "envs_per_worker", "local_envs", "ray_actors"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")

    @property
    def batch_steps_per_phase(self) -> int:
        """Batch steps (each steps every env once) of one train phase."""
        if self.phase_steps:
            return max(1, math.ceil(self.phase_steps / self.num_agents))
        if self.objective == "clipped":
            return self.steps_per_update
        return self.update_every * self.max_length // self.num_agents

    @property
    def eval_batch_steps(self) -> int:
        """Batch steps of one eval phase: every env finishes at least its share of episodes."""
        return self.max_length * math.ceil(self.eval_episodes / self.num_agents)

    @property
    def phases(self) -> int:
        """Train phases in the whole budget."""
        return math.ceil(self.steps / (self.batch_steps_per_phase * self.num_agents))


def _fields() -> dict[str, dataclasses.Field]:
    return {field.name: field for field in dataclasses.fields(TrainConfig)}


def _types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _parse(name: str, kind: Any, text: str) -> Any:
    """Parses `text` as a value of type `kind`; raises ValueError saying what was expected."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if text.strip().lower() in ("none", "null", "") and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        return _parse(name, options[0], text)
    if origin is tuple:
        parts = [p for p in text.replace("(", "").replace(")", "").split(",") if p.strip()]
        return tuple(_parse(name, args[0], p.strip()) for p in parts)
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(f"{name}={text!r}: expected true or false")
    if kind is int:
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            raise ValueError(f"{name}={text!r}: expected an integer") from None
        if not value.is_integer():
            raise ValueError(f"{name}={text!r}: expected an integer")
        return int(value)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name}={text!r}: expected a number") from None
    return text


def parse_override(config: TrainConfig, assignment: str) -> TrainConfig:
    """`config` with one `key=value` applied; a one-line ValueError for a bad key or value."""
    if "=" not in assignment:
        raise ValueError(f"--set {assignment!r}: expected key=value")
    name, text = (part.strip() for part in assignment.split("=", 1))
    if name not in _fields():
        close = difflib.get_close_matches(name, _fields(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown config key {name!r}{hint} (see --list-keys)")
    return dataclasses.replace(config, **{name: _parse(name, _types()[name], text)})


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain data (str, int, float, bool, None, lists) for YAML."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in dataclasses.asdict(config).items()
    }


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from plain data (as read from YAML); bad keys or values: one-line errors."""
    config = TrainConfig()
    for name, value in data.items():
        if isinstance(value, list | tuple):
            text = ",".join(str(v) for v in value)
        else:
            text = "none" if value is None else str(value)
        config = parse_override(config, f"{name}={text}")
    return config

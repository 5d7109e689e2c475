"""EnvSpec: the one static description of an env, in plain Python (no JAX to import)."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What batching, simulate and the networks know of an env before it runs.

    Attributes:
        observation_shape: Shape of one observation.
        discrete: Whether actions are integers in [0, num_actions).
        action_shape: Shape of one action; () for discrete actions.
        num_actions: Number of discrete actions; None for continuous actions.
        action_low: Lower bound of each continuous action element; None when discrete
            or unbounded.
        action_high: Upper bound, likewise.
        observation_dtype: Name of the observations' dtype.
    """

    observation_shape: tuple[int, ...]
    discrete: bool
    action_shape: tuple[int, ...] = ()
    num_actions: int | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    observation_dtype: str = "float32"

    def __post_init__(self):
        if self.discrete and (self.num_actions is None or self.action_shape != ()):
            raise ValueError(
                f"a discrete EnvSpec needs num_actions and action_shape (), got "
                f"num_actions={self.num_actions}, action_shape={self.action_shape}"
            )
        if not self.discrete and self.num_actions is not None:
            raise ValueError(f"a continuous EnvSpec has num_actions None, got {self.num_actions}")
        if (self.action_low is None) != (self.action_high is None):
            raise ValueError("action_low and action_high are given together or not at all")

    @property
    def action_size(self) -> int:
        """Discrete actions, or the number of elements of one continuous action."""
        return self.num_actions if self.discrete else math.prod(self.action_shape)

"""The learner's state both PPO objectives share: parameters, optimiser, normalisers, key, count.

Each objective embeds a `Learner` in its agent state beside what only it keeps (an
episode memory and penalty coefficient, or a rollout buffer). Acting reads the
parameters and updates the normalisers (`acting.begin` and `acting.end`); an update
changes the rest.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl.networks import encoder
from batchrl.parts import normalizer
from batchrl.ppo import agent_networks, sgd


@flax.struct.dataclass
class Learner:
    """What training changes and acting reads.

    Attributes:
        params: {"policy": ..., "value": ...} network parameters.
        opt_state: The optimiser's state.
        obs_norm: Streaming statistics of each vector leaf of numbers (and image without
            bounds) of the observation (the
            policy sees them normalised), a tree like the observation: a
            `NormalizerState` at each such leaf, None elsewhere (`encoder.init_normalizer`).
        reward_norm: Streaming statistics of rewards, or of discounted returns.
        key: Random key of the updates (minibatch order).
        updates: [] int32 updates done.
        metrics: The last update's metrics, [] float32 each, by name.
    """

    params: dict
    opt_state: Any
    obs_norm: encoder.NormTree
    reward_norm: normalizer.NormalizerState
    key: jax.Array
    updates: jax.Array
    metrics: dict[str, jax.Array]


def init(
    networks: agent_networks.Networks, key: jax.Array, metric_names: tuple[str, ...]
) -> Learner:
    """Fresh parameters and optimiser, empty normalisers, zero metrics.

    Compiled as one program: op by op, a CNN's initialisers and its optimiser's zeros are
    hundreds of programs to compile (20 s for the Nature CNN on CPU); the bits are the same.
    """
    config = networks.config

    def fresh(key: jax.Array) -> Learner:
        params_key, key = jax.random.split(key)
        params = networks.init(params_key)
        return Learner(
            params=params,
            opt_state=sgd.optimizer(config.learning_rate, config.max_grad_norm).init(params),
            obs_norm=encoder.init_normalizer(networks.env_spec.observation),
            reward_norm=normalizer.init(()),
            key=key,
            updates=jnp.zeros((), jnp.int32),
            metrics={name: jnp.zeros((), jnp.float32) for name in metric_names},
        )

    return jax.jit(fresh)(key)


@functools.partial(jax.jit, static_argnums=(1, 2))
def normalizer_metrics(
    learner: Learner, observations: bool = True, rewards: bool = True
) -> dict[str, jax.Array]:
    """Summaries of the streaming normalisers: mean and std over observation dimensions.

    Of those applied (`observations`, `rewards`) only: both keep their statistics
    always, and Atari's reward_std beside `normalize_rewards: false` read as a scale
    the rewards had. Observation summaries cover the normalised leaves, all their
    dimensions together; an observation with none (one-hots, bounded images) has none,
    and its count is the rewards'.
    One program: run op by op after every phase, its few operations compiled one
    program each on a run's first phase (0.35 s of a `pendulum_jax` run's start here).
    """
    states = encoder.normalized_states(learner.obs_norm) if observations else []
    metrics = {}
    if rewards:
        metrics["normalizer/reward_std"] = normalizer.std(learner.reward_norm).mean()
    if not states:
        return {**metrics, "normalizer/count": learner.reward_norm.count} if rewards else {}
    mean = jnp.concatenate([state.mean.reshape(-1) for state in states])
    std = jnp.concatenate([normalizer.std(state).reshape(-1) for state in states])
    return {
        "normalizer/obs_mean": mean.mean(),
        "normalizer/obs_std": std.mean(),
        **metrics,
        "normalizer/count": states[0].count,
    }


def check_finite(learner: Learner, metrics: dict[str, float], env_steps: int) -> None:
    """Stops training with an error naming every non-finite quantity and the env step.

    All of them, so that the error tells a NaN in the parameters (every loss follows)
    from one in a single quantity.
    """
    names = ("parameters", "obs_norm statistics", "reward_norm statistics")
    finite = jax.device_get(_all_finite((learner.params, learner.obs_norm, learner.reward_norm)))
    quantities = {name: 1.0 if ok else math.nan for name, ok in zip(names, finite, strict=True)}
    quantities.update({name: metrics[name] for name in learner.metrics})
    bad = [f"{name} ({value})" for name, value in quantities.items() if not math.isfinite(value)]
    if bad:
        # A normaliser's statistics read the env's own numbers: a NaN, inf or None there,
        # or finite numbers too large for float32 statistics.
        # Rewards first: a NaN reward makes the parameters NaN, whose actions can make the
        # observations NaN after it, while the observations had been finite.
        said = []
        if not finite[2]:
            said.append(normalizer.non_finite(jax.device_get(learner.reward_norm), "rewards"))
        if not finite[1]:
            follows = "" if finite[0] else _AFTER_PARAMETERS
            said += [line + follows for line in _normaliser_said(learner.obs_norm)]
        hint = (
            "the env's " + "; the env's ".join(said)
            if said
            else "lower the learning rate or check the env's observations and rewards"
        )
        raise FloatingPointError(
            f"{', '.join(bad)} became non-finite by env step {int(env_steps):,}; {hint}"
        )


_AFTER_PARAMETERS = " (or the non-finite actions of non-finite parameters made them so)"


def _normaliser_said(obs_norm: Any) -> list[str]:
    """What made each non-finite observation leaf's statistics so (`normalizer.non_finite`)."""
    paths = jax.device_get(encoder.normalized_paths(obs_norm))
    said = [normalizer.non_finite(state, path) for path, state in paths]
    return [f"observations {line}" for line in said if line is not None]


@jax.jit
def _all_finite(trees: tuple[Any, ...]) -> tuple[jax.Array, ...]:
    """Whether each tree's leaves are all finite, in one program.

    Op by op, each leaf's check compiled a program of its own on the first phase (1.2 s
    of a `pendulum_jax` run's start here).
    """
    return tuple(
        jnp.all(jnp.stack([jnp.isfinite(leaf).all() for leaf in jax.tree.leaves(tree)] or [True]))
        for tree in trees
    )

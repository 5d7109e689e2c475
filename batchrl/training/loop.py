"""Alternating train and eval phases of a PPO agent over one batched env, as the seed does.

Training runs the sampling agent through `simulate` for a phase of env steps (updates
happen inside, when the agent's memory is full); evaluation restarts a separate set of
episodes and runs the mean action until every env has finished one. Each phase is one
compiled program; this loop only reads the metrics it returns.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.parts import normalizer
from batchrl.ppo import clipped
from batchrl.ppo import config as config_lib
from batchrl.ppo import policy as policy_lib


@dataclasses.dataclass
class Phase:
    """The compiled phases of one run and the state they pass along."""

    train: Callable
    evaluate: Callable
    train_state: simulate.State
    eval_state: simulate.State
    agent_state: Any
    shared_envs: bool  # Train and eval step the same host envs: restart them between phases.
    env_steps: int = 0


def _algorithm(config: config_lib.Config) -> Any:
    if config.objective == "clipped":
        return clipped
    from batchrl.ppo import penalty

    return penalty


def build(
    config: config_lib.Config, env: simulate.BatchedEnv, train_steps: int, eval_steps: int
) -> Phase:
    """Compiles a train phase of `train_steps` batch steps and an eval phase of `eval_steps`."""
    algorithm = _algorithm(config)
    networks = policy_lib.for_env(config, env)
    key = jax.random.key(config.seed)
    agent_key, train_key, eval_key = jax.random.split(key, 3)
    agent_state = algorithm.init(networks, env.num_envs, agent_key)
    train = simulate.make_rollout(env, algorithm.agent(networks, training=True), train_steps)
    evaluate = simulate.make_rollout(env, algorithm.agent(networks, training=False), eval_steps)
    return Phase(
        train=train,
        evaluate=evaluate,
        train_state=simulate.init(env, train_key),
        eval_state=simulate.init(env, eval_key),
        agent_state=agent_state,
        # Envs stepped on the host are one set, whichever simulate state drives them.
        shared_envs=getattr(env, "calls_host", False),
    )


def normalizer_metrics(agent_state: Any) -> dict[str, jax.Array]:
    """Summaries of the streaming normalisers: mean and std over observation dimensions."""
    return {
        "normalizer/obs_mean": agent_state.obs_norm.mean.mean(),
        "normalizer/obs_std": normalizer.std(agent_state.obs_norm).mean(),
        "normalizer/reward_std": normalizer.std(agent_state.reward_norm).mean(),
        "normalizer/count": agent_state.obs_norm.count,
    }


def check_finite(agent_state: Any, metrics: dict[str, float], env_steps: int) -> None:
    """Stops training with an error naming the first non-finite quantity and the env step."""
    quantities = {name: metrics[name] for name in getattr(agent_state, "metrics", {})}
    quantities["parameters"] = _all_finite(agent_state.params)
    for name in ("obs_norm", "reward_norm"):
        quantities[f"{name} statistics"] = _all_finite(getattr(agent_state, name))
    for name, value in quantities.items():
        if not math.isfinite(value):
            raise FloatingPointError(
                f"{name} became {value} by env step {env_steps}; lower the learning rate or "
                f"check the env's observations and rewards"
            )


def _all_finite(tree: Any) -> float:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
    return 1.0 if bool(jnp.all(jnp.stack(leaves))) else math.nan


def run(phase: Phase, num_envs: int, train_steps: int, phases: int) -> Iterator[dict[str, float]]:
    """Runs `phases` train+eval phases; yields one flat metrics dict per phase."""
    for _ in range(phases):
        start = time.perf_counter()
        state = simulate.clear_summary(phase.train_state)
        restart = jnp.asarray(phase.shared_envs)
        state, agent_state = phase.train(state, phase.agent_state, restart)
        jax.block_until_ready(agent_state)
        seconds = time.perf_counter() - start
        phase.train_state, phase.agent_state = state, agent_state
        phase.env_steps += train_steps * num_envs
        eval_state = simulate.clear_summary(phase.eval_state)
        eval_state, _ = phase.evaluate(eval_state, agent_state, jnp.asarray(True))
        phase.eval_state = eval_state
        metrics = {f"train/{k.split('/')[1]}": v for k, v in simulate.summary(state).items()}
        metrics.update(
            {f"eval/{k.split('/')[1]}": v for k, v in simulate.summary(eval_state).items()}
        )
        metrics.update(getattr(agent_state, "metrics", {}))
        metrics.update(normalizer_metrics(agent_state))
        metrics = {name: float(value) for name, value in metrics.items()}
        check_finite(agent_state, metrics, phase.env_steps)
        metrics["perf/env_steps"] = float(phase.env_steps)
        metrics["perf/env_steps_per_sec"] = train_steps * num_envs / seconds
        yield metrics

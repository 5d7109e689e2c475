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


def evaluate(
    phase: Phase, eval_state: simulate.State, agent_state: Any, episodes: int
) -> tuple[simulate.State, dict[str, float]]:
    """Runs the eval phase until at least `episodes` episodes ended; their summary.

    The eval phase ends every env's episode (at least `eval_episodes` in all), so one
    round is enough unless more episodes are asked for.
    """
    score = length = count = 0.0
    while count < episodes or count == 0:
        eval_state = simulate.clear_summary(eval_state)
        eval_state, _ = phase.evaluate(eval_state, agent_state, jnp.asarray(True))
        summary = {name: float(value) for name, value in simulate.summary(eval_state).items()}
        if summary["episode/count"] == 0:
            break
        count += summary["episode/count"]
        score += summary["episode/return"] * summary["episode/count"]
        length += summary["episode/length"] * summary["episode/count"]
    return eval_state, {
        "episode/count": count,
        "episode/return": score / count if count else math.nan,
        "episode/length": length / count if count else math.nan,
    }


def run(
    phase: Phase,
    num_envs: int,
    train_steps: int,
    phases: int,
    *,
    eval_every: int = 1,
    final_episodes: int = 1,
    done: int = 0,
    total: int | None = None,
) -> Iterator[dict[str, float]]:
    """Runs train phases done+1 .. done+phases; yields one flat metrics dict per phase.

    A phase is evaluated when its number is a multiple of `eval_every`, and always when
    it is the run's last (`total`, default done + phases). The last one runs the eval
    phase again until at least `final_episodes` episodes have ended; its row also
    carries `final/return` and `final/episodes`, the mean-action return of the final
    policy. `phase` takes the new states only when the phase's metrics are ready, so an
    interrupt during a phase leaves it as it was after the previous one.
    """
    total = done + phases if total is None else total
    for number in range(done + 1, done + phases + 1):
        start = time.perf_counter()
        state = simulate.clear_summary(phase.train_state)
        restart = jnp.asarray(phase.shared_envs)
        state, agent_state = phase.train(state, phase.agent_state, restart)
        jax.block_until_ready(agent_state)
        train_seconds = time.perf_counter() - start
        metrics = {f"train/{k.split('/')[1]}": v for k, v in simulate.summary(state).items()}
        eval_state, eval_seconds = phase.eval_state, 0.0
        if number % eval_every == 0 or number == total:
            start = time.perf_counter()
            least = final_episodes if number == total else 1
            eval_state, summary = evaluate(phase, eval_state, agent_state, least)
            metrics.update({f"eval/{k.split('/')[1]}": v for k, v in summary.items()})
            eval_seconds = time.perf_counter() - start
        metrics.update(getattr(agent_state, "metrics", {}))
        metrics.update(normalizer_metrics(agent_state))
        metrics = {name: float(value) for name, value in metrics.items()}
        env_steps = phase.env_steps + train_steps * num_envs
        check_finite(agent_state, metrics, env_steps)
        if number == total:
            metrics["final/return"] = metrics["eval/return"]
            metrics["final/episodes"] = metrics["eval/count"]
        metrics["perf/env_steps"] = float(env_steps)
        metrics["perf/env_steps_per_sec"] = train_steps * num_envs / train_seconds
        metrics["perf/train_seconds"] = train_seconds
        metrics["perf/eval_seconds"] = eval_seconds
        phase.train_state, phase.agent_state, phase.eval_state = state, agent_state, eval_state
        phase.env_steps = env_steps
        yield metrics

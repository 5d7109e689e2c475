"""Both PPO objectives as `algorithm.Algorithm`s: the functions the training loop calls.

Each objective (`penalty`, `clipped`) brings its own init, recorder, cut and learn; what
both share (networks, acting, metrics) is written here once. Their configs name these
records (`PenaltyConfig.algorithm`, `ClippedConfig.algorithm`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jax

from batchrl import algorithm
from batchrl.ppo import acting, agent_networks, clipped, penalty
from batchrl.ppo import learner as learner_lib


def begin(state: Any) -> acting.Acting:
    """The acting state of a stretch: the learner's parameters and statistics, each env's state."""
    return acting.begin(state.learner, state.running)


def end(state: Any, acting_state: acting.Acting, storage: Any) -> Any:
    """The agent after a stretch: the statistics acting gathered, running state, storage."""
    learner, running = acting.end(state.learner, acting_state)
    return state.replace(learner=learner, running=running, storage=storage)


def fresh_acting(
    networks: agent_networks.Networks, learner: learner_lib.Learner, num_envs: int
) -> acting.Acting:
    """Acting with a trained learner on `num_envs` envs that start their episodes."""
    return acting.begin(learner, acting.running(networks, num_envs))


def metrics(
    networks: agent_networks.Networks, learner: learner_lib.Learner
) -> dict[str, jax.Array]:
    """The last update's metrics and the summaries of the normalisers the config applies."""
    config = networks.config
    normalizers = learner_lib.normalizer_metrics(
        learner, config.normalize_observations, config.normalize_rewards
    )
    return {**learner.metrics, **normalizers}


def updates(learner: learner_lib.Learner) -> jax.Array:
    """The updates `learner` has trained."""
    return learner.updates


# The clipped objective's rollout fills after a fixed number of steps, which every share
# of the envs knows; the penalty objective's episode memory fills when the batch's
# episodes say, so only the clipped one acts in shares.
SHARES = algorithm.Shares(
    split=acting.split,
    combine=acting.combine,
    returned=acting.returned,
    join=acting.join,
    storage_axis=1,  # The rollout's [T, B, ...].
)


def _algorithm(objective: ModuleType, shares: algorithm.Shares | None) -> algorithm.Algorithm:
    return algorithm.Algorithm(
        networks=agent_networks.Networks,
        init=objective.init,
        recorder=objective.recorder,
        cut=objective.cut,
        learn=objective.learn,
        clear=objective.clear,
        holds_steps=objective.holds_steps,
        begin=begin,
        end=end,
        acting=fresh_acting,
        sampling_agent=acting.sampling_agent,
        evaluation_agent=acting.evaluation_agent,
        metrics=metrics,
        update_metrics=objective.METRICS,
        updates=updates,
        check_finite=learner_lib.check_finite,
        shares=shares,
    )


PENALTY = _algorithm(penalty, None)
CLIPPED = _algorithm(clipped, SHARES)

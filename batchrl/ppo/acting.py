"""Acting for both PPO objectives: the state a batch step carries, and the two agents on it.

A batch step carries `Acting` only: the policy's parameters (read), the observation and
reward normalisers (updated every step, as the seed's `experience` did), and each env's
running state (a recurrent policy's carry, the discounted return that scales rewards).
`begin` builds it from the learner before a stretch of steps and `end` hands the
normalisers back after it; the optimiser, the episode memory or rollout buffer and the
update never ride through a step.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import simulate, types
from batchrl.parts import normalizer
from batchrl.ppo import learner as learner_lib
from batchrl.ppo import policy as policy_lib


@flax.struct.dataclass
class Running:
    """Each env's acting state that outlives a stretch of steps.

    Attributes:
        carry: [B, H] recurrent policy state ([B, 0] for feed-forward policies).
        discounted_return: [B] the discounted reward sum of each env's running episode.
    """

    carry: jax.Array
    discounted_return: jax.Array


@flax.struct.dataclass
class Acting:
    """What a batch step reads and writes of a PPO agent."""

    params: dict
    obs_norm: normalizer.NormalizerState
    reward_norm: normalizer.NormalizerState
    running: Running


@flax.struct.dataclass
class Choice:
    """What the sampling agent keeps of each action it takes, [B, ...] each.

    Attributes:
        action: The action as the policy sees it, before mapping onto the env's bounds.
        dist: The action distribution's parameters.
        log_prob: [B] the action's log-probability.
    """

    action: jax.Array
    dist: Any
    log_prob: jax.Array


def running(networks: policy_lib.Networks, num_envs: int) -> Running:
    """The running state of `num_envs` envs before their first step."""
    return Running(
        carry=networks.initial_carry(num_envs),
        discounted_return=jnp.zeros((num_envs,), jnp.float32),
    )


def begin(learner: learner_lib.Learner, running: Running) -> Acting:
    """The acting state for a stretch of steps with the learner's parameters and statistics."""
    return Acting(learner.params, learner.obs_norm, learner.reward_norm, running)


def end(learner: learner_lib.Learner, acting: Acting) -> tuple[learner_lib.Learner, Running]:
    """The learner with the statistics acting gathered, and the envs' running state."""
    learner = learner.replace(obs_norm=acting.obs_norm, reward_norm=acting.reward_norm)
    return learner, acting.running


def choice_example(networks: policy_lib.Networks, num_envs: int) -> Choice:
    """Zeros shaped as the sampling agent's choices for `num_envs` envs."""
    params = jax.eval_shape(networks.init, jax.random.key(0))
    obs = jax.ShapeDtypeStruct((num_envs, *networks.observation_shape), jnp.float32)
    carry = jax.ShapeDtypeStruct(networks.initial_carry(num_envs).shape, jnp.float32)
    _, dist = jax.eval_shape(networks.step_distribution, params, carry, obs)
    action_shape = () if networks.discrete else (networks.action_size,)
    action_dtype = jnp.int32 if networks.discrete else jnp.float32
    return Choice(
        action=jnp.zeros((num_envs, *action_shape), action_dtype),
        dist=jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), dist),
        log_prob=jnp.zeros((num_envs,), jnp.float32),
    )


def _begin_episode(networks: policy_lib.Networks, acting: Acting, mask: jax.Array) -> Acting:
    fresh = networks.initial_carry(mask.shape[0])
    return acting.replace(
        running=Running(
            carry=jnp.where(mask[:, None], fresh, acting.running.carry),
            discounted_return=jnp.where(mask, 0.0, acting.running.discounted_return),
        )
    )


def sampling_agent(networks: policy_lib.Networks) -> simulate.Agent:
    """Samples actions and updates the normalisers; each step's `Choice` is its extra.

    Rewards are scaled by the std of rewards ("reward", the seed's) or of each env's
    discounted return so far ("return", Gymnasium's NormalizeReward).
    """
    config = networks.config

    def begin_episode(acting: Acting, mask: jax.Array) -> Acting:
        return _begin_episode(networks, acting, mask)

    def perform(acting: Acting, obs: jax.Array, key: jax.Array) -> tuple[Acting, jax.Array, Choice]:
        obs = networks.normalize_obs(acting.obs_norm, obs)
        carry, dist = networks.step_distribution(acting.params, acting.running.carry, obs)
        action = networks.sample(dist, key)
        choice = Choice(action=action, dist=dist, log_prob=networks.log_prob(dist, action))
        acting = acting.replace(running=acting.running.replace(carry=carry))
        return acting, networks.to_env(action), choice

    def experience(acting: Acting, transition: types.Transition) -> Acting:
        reward = transition.reward.astype(jnp.float32)
        discounted = acting.running.discounted_return * config.discount + reward
        scaled_by = discounted if config.reward_scale == "return" else reward
        return acting.replace(
            obs_norm=normalizer.update(acting.obs_norm, transition.obs.astype(jnp.float32)),
            reward_norm=normalizer.update(acting.reward_norm, scaled_by),
            running=acting.running.replace(discounted_return=discounted),
        )

    def end_episode(acting: Acting, mask: jax.Array) -> Acting:
        del mask  # The next step's begin_episode starts the env's running state anew.
        return acting

    return simulate.Agent(begin_episode, perform, experience, end_episode)


def evaluation_agent(networks: policy_lib.Networks) -> simulate.Agent:
    """Acts with the mode of the policy's distribution; learns and gathers nothing."""

    def begin_episode(acting: Acting, mask: jax.Array) -> Acting:
        return _begin_episode(networks, acting, mask)

    def perform(acting: Acting, obs: jax.Array, key: jax.Array) -> tuple[Acting, jax.Array, tuple]:
        del key
        obs = networks.normalize_obs(acting.obs_norm, obs)
        carry, dist = networks.step_distribution(acting.params, acting.running.carry, obs)
        acting = acting.replace(running=acting.running.replace(carry=carry))
        return acting, networks.to_env(networks.mode(dist)), ()

    def unchanged(acting: Acting, _: Any) -> Acting:
        return acting

    return simulate.Agent(begin_episode, perform, unchanged, unchanged)

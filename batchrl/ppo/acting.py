"""Acting for both PPO objectives: the state a batch step carries, and the two agents on it.

A batch step carries `Acting` only: the policy's parameters (read), the observation and
reward normalisers (updated every step, as the seed's `experience` did, or once a segment:
`normalizer_updates`), and each env's running state (a recurrent policy's carry, the
discounted return that scales rewards).
The sampling agent also values each step's next observation as it acts, so learners
bootstrap a truncated episode without storing observations twice.
`begin` builds it from the learner before a stretch of steps and `end` hands the
normalisers back after it; the optimiser, the episode memory or rollout buffer and the
update never ride through a step.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl import records, simulate
from batchrl.networks import encoder
from batchrl.parts import normalizer
from batchrl.ppo import agent_networks
from batchrl.ppo import learner as learner_lib


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
    """What a batch step reads and writes of a PPO agent.

    With `normalizer_updates="segment"` the normalisers stay as the segment began and
    `obs_seen`, `reward_seen` gather its steps' statistics, merged in at its end (`end`):
    envs acting apart (rollout actors) then act as they would together. Every step they
    stay empty.
    """

    params: dict
    obs_norm: encoder.NormTree
    reward_norm: normalizer.NormalizerState
    running: Running
    obs_seen: encoder.NormTree
    reward_seen: normalizer.NormalizerState


@flax.struct.dataclass
class Choice:
    """What the sampling agent keeps of each action it takes, [B, ...] each.

    Attributes:
        action: The action as the policy sees it, before mapping onto the env's space.
        dist: The action distribution's parameters.
        log_prob: [B] the action's log-probability.
        next_value: [B] float32, the value of the step's next observation (for an ended
            episode, its final observation) under the acting parameters and normaliser;
            what learners bootstrap from where that observation is not stored.
    """

    action: jax.Array
    dist: Any
    log_prob: jax.Array
    next_value: jax.Array


def running(networks: agent_networks.Networks, num_envs: int) -> Running:
    """The running state of `num_envs` envs before their first step."""
    return Running(
        carry=networks.initial_carry(num_envs),
        discounted_return=jnp.zeros((num_envs,), jnp.float32),
    )


def begin(learner: learner_lib.Learner, running: Running) -> Acting:
    """The acting state for a stretch of steps with the learner's parameters and statistics."""
    empty = functools.partial(jax.tree.map, jnp.zeros_like)  # A NormalizerState's init.
    return Acting(
        params=learner.params,
        obs_norm=learner.obs_norm,
        reward_norm=learner.reward_norm,
        running=running,
        obs_seen=empty(learner.obs_norm),
        reward_seen=empty(learner.reward_norm),
    )


def end(learner: learner_lib.Learner, acting: Acting) -> tuple[learner_lib.Learner, Running]:
    """The learner with the statistics acting gathered, and the envs' running state."""
    learner = learner.replace(
        obs_norm=merge_norms(acting.obs_norm, acting.obs_seen),
        reward_norm=normalizer.merge(acting.reward_norm, acting.reward_seen),
    )
    return learner, acting.running


def merge_norms(obs_norm: encoder.NormTree, seen: encoder.NormTree) -> encoder.NormTree:
    """`obs_norm` with the statistics `seen` merged in, leaf by normalised leaf."""
    return jax.tree.map(
        normalizer.merge,
        obs_norm,
        seen,
        is_leaf=lambda node: isinstance(node, normalizer.NormalizerState),
    )


def split(acting: Acting) -> tuple[Acting, Running]:
    """What envs acting apart read alike, and each env's running state (`Shares.split`)."""
    return acting.replace(running=None), acting.running


def combine(shared: Acting, running: Running) -> Acting:
    """A share's acting state from the shared part and its envs' running state."""
    return shared.replace(running=running)


def returned(acting: Acting) -> tuple[Running, encoder.NormTree, normalizer.NormalizerState]:
    """What a share sends back after a segment: its envs' state, its steps' statistics."""
    return acting.running, acting.obs_seen, acting.reward_seen


def join(began: Acting, parts: list[tuple]) -> Acting:
    """The acting state after a segment acted in shares, from what each share returned.

    The shares' statistics merge in the order of their envs: the whole batch's within
    float error (`normalizer.merge`).
    """
    (_, obs_seen, reward_seen), *rest = parts
    for _, more_obs, more_reward in rest:
        obs_seen = merge_norms(obs_seen, more_obs)
        reward_seen = normalizer.merge(reward_seen, more_reward)
    rows = jax.tree.map(lambda *leaves: jnp.concatenate(leaves), *(part[0] for part in parts))
    return began.replace(running=rows, obs_seen=obs_seen, reward_seen=reward_seen)


def by_segment(config: Any) -> bool:
    """Whether acting with `config` updates its normalisers once a segment, not every step."""
    return config.normalizer_updates == "segment"


def obs_zeros(networks: agent_networks.Networks, leading: tuple[int, ...]) -> Any:
    """Zero observations, leaves [*leading, *leaf.shape] in the dtypes compiled code holds.

    Each leaf keeps its dtype, 64-bit kinds as their 32-bit ones (JAX runs without x64).
    """
    return env_spec_lib.map_tree(
        lambda leaf: jnp.zeros((*leading, *leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype)),
        networks.env_spec.observation,
    )


def choice_example(networks: agent_networks.Networks, num_envs: int) -> Choice:
    """Zeros shaped as the sampling agent's choices for `num_envs` envs."""
    params = jax.eval_shape(networks.init, jax.random.key(0))
    features = jax.ShapeDtypeStruct((num_envs, networks.feature_size), jnp.float32)
    carry = jax.ShapeDtypeStruct(networks.initial_carry(num_envs).shape, jnp.float32)
    _, dist = jax.eval_shape(networks.step_distribution, params, carry, features)
    action = jax.eval_shape(networks.sample, dist, jax.random.key(0))
    zeros = lambda x: jnp.zeros(x.shape, x.dtype)  # noqa: E731
    return Choice(
        action=zeros(action),
        dist=jax.tree.map(zeros, dist),
        log_prob=jnp.zeros((num_envs,), jnp.float32),
        next_value=jnp.zeros((num_envs,), jnp.float32),
    )


def _begin_episode(networks: agent_networks.Networks, acting: Acting, mask: jax.Array) -> Acting:
    fresh = networks.initial_carry(mask.shape[0])
    return acting.replace(
        running=Running(
            carry=jnp.where(mask[:, None], fresh, acting.running.carry),
            discounted_return=jnp.where(mask, 0.0, acting.running.discounted_return),
        )
    )


def sampling_agent(networks: agent_networks.Networks) -> simulate.Agent:
    """Samples actions and updates the normalisers; each step's `Choice` is its extra.

    Rewards are scaled by the std of rewards ("reward", the seed's) or of each env's
    discounted return so far ("return", Gymnasium's NormalizeReward).
    """
    config, observation = networks.config, networks.env_spec.observation

    def begin_episode(acting: Acting, mask: jax.Array) -> Acting:
        return _begin_episode(networks, acting, mask)

    def perform(acting: Acting, obs: Any, key: jax.Array) -> tuple[Acting, jax.Array, Choice]:
        features = networks.features(acting.obs_norm, obs)
        carry, dist = networks.step_distribution(acting.params, acting.running.carry, features)
        action = networks.sample(dist, key)
        choice = Choice(
            action=action,
            dist=dist,
            log_prob=networks.log_prob(dist, action),
            next_value=jnp.zeros(features.shape[:1], jnp.float32),  # Set by `experience`.
        )
        acting = acting.replace(running=acting.running.replace(carry=carry))
        return acting, networks.to_env(action), choice

    def experience(
        acting: Acting, transition: records.Transition, choice: Choice
    ) -> tuple[Acting, Choice]:
        reward = transition.reward.astype(jnp.float32)
        discounted = acting.running.discounted_return * config.discount + reward
        scaled_by = discounted if config.reward_scale == "return" else reward
        running = acting.running.replace(discounted_return=discounted)
        if by_segment(config):
            acting = acting.replace(
                obs_seen=encoder.update_normalizer(observation, acting.obs_seen, transition.obs),
                reward_seen=normalizer.update(acting.reward_seen, scaled_by),
                running=running,
            )
        else:
            acting = acting.replace(
                obs_norm=encoder.update_normalizer(observation, acting.obs_norm, transition.obs),
                reward_norm=normalizer.update(acting.reward_norm, scaled_by),
                running=running,
            )
        next_features = networks.features(acting.obs_norm, transition.next_obs)
        return acting, choice.replace(next_value=networks.value(acting.params, next_features))

    def end_episode(acting: Acting, mask: jax.Array) -> Acting:
        del mask  # The next step's begin_episode starts the env's running state anew.
        return acting

    return simulate.Agent(begin_episode, perform, experience, end_episode)


def evaluation_agent(networks: agent_networks.Networks, sample: bool = False) -> simulate.Agent:
    """Acts with the mode of the policy's distribution; learns and gathers nothing.

    `sample` draws each action from the distribution instead, the policy as training runs
    it, with the normalisers left as they are: a mean action that falls where sampled
    actions do not is a fragile mode, not a lost policy (a held-out Hopper seed's final
    policy: 1,373 with its mean action, 3,027 sampled).
    """

    def begin_episode(acting: Acting, mask: jax.Array) -> Acting:
        return _begin_episode(networks, acting, mask)

    def perform(acting: Acting, obs: Any, key: jax.Array) -> tuple[Acting, jax.Array, tuple]:
        features = networks.features(acting.obs_norm, obs)
        carry, dist = networks.step_distribution(acting.params, acting.running.carry, features)
        acting = acting.replace(running=acting.running.replace(carry=carry))
        action = networks.sample(dist, key) if sample else networks.mode(dist)
        return acting, networks.to_env(action), ()

    def experience(acting: Acting, transition: records.Transition, extra: tuple) -> tuple:
        del transition
        return acting, extra

    def end_episode(acting: Acting, mask: jax.Array) -> Acting:
        del mask
        return acting

    return simulate.Agent(begin_episode, perform, experience, end_episode)

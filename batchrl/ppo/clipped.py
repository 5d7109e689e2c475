"""Clipped PPO as a simulate Agent: fixed steps per env, GAE, shuffled minibatches.

Each env contributes `steps_per_update` steps to a rollout [T, B]; when it is full,
`end_episode` runs the update inside the same compiled program (lax.cond). Time limits
are bootstrapped: a truncated step's advantage uses the value of its final observation.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import simulate, types
from batchrl.parts import normalizer, returns
from batchrl.ppo import losses, sgd
from batchrl.ppo import policy as policy_lib


@flax.struct.dataclass
class Rollout:
    """Steps [T, B] collected since the last update (raw observations and rewards)."""

    obs: jax.Array
    action: jax.Array  # The policy's action, before mapping onto the env's bounds.
    log_prob: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array


@flax.struct.dataclass
class State:
    """Everything the clipped PPO agent carries between steps and updates."""

    params: dict
    opt_state: Any
    obs_norm: normalizer.NormalizerState
    reward_norm: normalizer.NormalizerState  # Of rewards, or of discounted returns.
    discounted_return: jax.Array  # [B] each env's discounted reward sum in this episode
    rollout: Rollout
    position: jax.Array  # [] int32 steps written into the rollout
    action: jax.Array  # [B, ...] the last action sampled, as the policy sees it
    log_prob: jax.Array  # [B]
    key: jax.Array
    updates: jax.Array  # [] int32
    metrics: dict[str, jax.Array]


METRICS = ("train/policy_loss", "train/value_loss", "train/entropy", "train/kl", "train/grad_norm")


def init(networks: policy_lib.Networks, num_envs: int, key: jax.Array) -> State:
    """A fresh agent for `num_envs` envs."""
    config = networks.config
    params_key, key = jax.random.split(key)
    params = networks.init(params_key)
    steps, obs_shape = config.steps_per_update, networks.observation_shape
    action_shape = () if networks.discrete else (networks.action_size,)
    action_dtype = jnp.int32 if networks.discrete else jnp.float32
    zeros = jnp.zeros((steps, num_envs), jnp.float32)
    falses = jnp.zeros((steps, num_envs), bool)
    rollout = Rollout(
        obs=jnp.zeros((steps, num_envs, *obs_shape), jnp.float32),
        action=jnp.zeros((steps, num_envs, *action_shape), action_dtype),
        log_prob=zeros,
        reward=zeros,
        terminated=falses,
        truncated=falses,
        next_obs=jnp.zeros((steps, num_envs, *obs_shape), jnp.float32),
    )
    return State(
        params=params,
        opt_state=sgd.optimizer(config.learning_rate, config.max_grad_norm).init(params),
        obs_norm=normalizer.init(obs_shape),
        reward_norm=normalizer.init(()),
        discounted_return=jnp.zeros((num_envs,), jnp.float32),
        rollout=rollout,
        position=jnp.zeros((), jnp.int32),
        action=jnp.zeros((num_envs, *action_shape), action_dtype),
        log_prob=jnp.zeros((num_envs,), jnp.float32),
        key=key,
        updates=jnp.zeros((), jnp.int32),
        metrics={name: jnp.zeros((), jnp.float32) for name in METRICS},
    )


def agent(networks: policy_lib.Networks) -> simulate.Agent:
    """The training agent's functions for simulate: sampling, storing steps, updating."""

    def begin_episode(state: State, mask: jax.Array) -> State:
        # An env restarted without ending (a reset when switching phases) cuts its episode:
        # its last stored step becomes truncated, so it is bootstrapped and not continued.
        last = jnp.maximum(state.position - 1, 0)
        cut = mask & (state.position > 0)
        truncated = state.rollout.truncated.at[last].set(state.rollout.truncated[last] | cut)
        return state.replace(rollout=state.rollout.replace(truncated=truncated))

    def perform(state: State, obs: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        dist = networks.distribution(state.params, networks.normalize_obs(state.obs_norm, obs))
        action = networks.sample(dist, key)
        state = state.replace(action=action, log_prob=networks.log_prob(dist, action))
        return state, networks.to_env(action)

    def experience(state: State, transition: types.Transition) -> State:
        rollout, t = state.rollout, state.position
        step = Rollout(
            obs=transition.obs.astype(jnp.float32),
            action=state.action,
            log_prob=state.log_prob,
            reward=transition.reward.astype(jnp.float32),
            terminated=transition.terminated,
            truncated=transition.truncated,
            next_obs=transition.next_obs.astype(jnp.float32),
        )
        rollout = jax.tree.map(lambda buffer, x: buffer.at[t].set(x), rollout, step)
        discounted = state.discounted_return * networks.config.discount + step.reward
        scaled_by = discounted if networks.config.reward_scale == "return" else step.reward
        done = transition.terminated | transition.truncated
        return state.replace(
            rollout=rollout,
            position=t + 1,
            obs_norm=normalizer.update(state.obs_norm, transition.obs.astype(jnp.float32)),
            reward_norm=normalizer.update(state.reward_norm, scaled_by),
            discounted_return=jnp.where(done, 0.0, discounted),
        )

    def end_episode(state: State, mask: jax.Array) -> State:
        del mask
        full = state.position >= networks.config.steps_per_update
        return jax.lax.cond(full, lambda s: update(networks, s), lambda s: s, state)

    return simulate.Agent(begin_episode, perform, experience, end_episode)


def update(networks: policy_lib.Networks, state: State) -> State:
    """One PPO update on the full rollout: GAE, then epochs of shuffled minibatches."""
    config = networks.config
    rollout = state.rollout
    steps, num_envs = rollout.reward.shape
    obs = networks.normalize_obs(state.obs_norm, rollout.obs)
    next_obs = networks.normalize_obs(state.obs_norm, rollout.next_obs)
    reward = rollout.reward
    if config.normalize_rewards:
        reward = normalizer.normalize(
            state.reward_norm, reward, center=False, clip=config.reward_clip
        )
    flat = lambda x: x.reshape((steps * num_envs, *x.shape[2:]))  # noqa: E731
    done = rollout.terminated | rollout.truncated
    lambda_ = 1.0 if config.gae_lambda is None else config.gae_lambda
    gae = jax.vmap(returns.gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)

    def advantages(params: dict) -> dict[str, jax.Array]:
        value = networks.value(params, flat(obs)).reshape(steps, num_envs)
        next_value = networks.value(params, flat(next_obs)).reshape(steps, num_envs)
        advantage = gae(
            reward, value, next_value, rollout.terminated, done, config.discount, lambda_
        )
        return {
            "advantage": flat(advantage),
            "target": flat(advantage + value),
            "value": flat(value),
        }

    data = {
        "obs": flat(obs),
        "action": flat(rollout.action),
        "log_prob": flat(rollout.log_prob),
        **advantages(state.params),
    }
    data["old_dist"] = networks.distribution(state.params, data["obs"])
    # CleanRL's anneal_lr: Adam's step scaled by 1 - updates/total, reaching zero at `steps`.
    progress = state.updates / config.total_updates
    lr_scale = jnp.maximum(1.0 - progress, 0.0) if config.anneal_learning_rate else 1.0

    def loss_fn(params: dict, minibatch: dict) -> tuple[jax.Array, dict]:
        dist = networks.distribution(params, minibatch["obs"])
        log_prob = networks.log_prob(dist, minibatch["action"])
        advantage = minibatch["advantage"]
        if config.normalize_advantages:
            advantage = losses.standardize(advantage)
        policy_loss = losses.clipped_policy_loss(
            log_prob, minibatch["log_prob"], advantage, config.clip_ratio
        )
        value = networks.value(params, minibatch["obs"])
        value_loss = losses.value_loss(
            value, minibatch["target"], minibatch["value"], config.clip_value
        )
        entropy = networks.entropy(dist).mean()
        kl = networks.kl(minibatch["old_dist"], dist).mean()
        total = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
        return total, {
            "train/policy_loss": policy_loss,
            "train/value_loss": value_loss,
            "train/entropy": entropy,
            "train/kl": kl,
        }

    def refresh(params: dict, data: dict) -> dict:
        return {**data, **advantages(params)}

    key, epoch_key = jax.random.split(state.key)
    params, opt_state, metrics = sgd.run_epochs(
        sgd.optimizer(config.learning_rate, config.max_grad_norm),
        state.params,
        state.opt_state,
        data,
        loss_fn,
        epoch_key,
        epochs=config.update_epochs,
        batch_size=config.minibatch_size,
        refresh=refresh if config.recompute_advantages else None,
        target_kl=config.target_kl,
        step_scale=lr_scale,
        devices=config.learner_devices,
    )
    return state.replace(
        params=params,
        opt_state=opt_state,
        position=jnp.zeros((), jnp.int32),
        key=key,
        updates=state.updates + 1,
        metrics={name: value.mean() for name, value in metrics.items()},
    )

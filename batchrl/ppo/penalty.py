"""The seed's BatchPPO as a simulate Agent: episode memory and an adaptive KL penalty.

`num_agents` envs fill the episode memory with finished episodes; when it holds
`update_every` of them, `end_episode` trains inside the same compiled program
(lax.cond) and clears it. The objective is -ratio*advantage + beta*KL(old||new) +
kl_cutoff_coef*max(0, KL - kl_cutoff_factor*kl_target)^2; beta adapts after each
update. Advantages are Monte-Carlo returns minus values (GAE when gae_lambda is set),
standardised; a truncated episode is bootstrapped from its final observation's value.
Each epoch runs over the chunks of the memory that hold steps, not over its padding.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import simulate, types
from batchrl.parts import memory, normalizer, returns
from batchrl.ppo import losses, sgd
from batchrl.ppo import policy as policy_lib


@flax.struct.dataclass
class State:
    """Everything the KL-penalty agent carries between steps and updates."""

    params: dict
    opt_state: Any
    obs_norm: normalizer.NormalizerState
    reward_norm: normalizer.NormalizerState
    memory: memory.MemoryState
    penalty: jax.Array  # [] the KL penalty coefficient beta
    action: jax.Array  # [B, ...] the last action, as the policy sees it
    dist: Any  # The last action distribution's parameters, [B, ...] each
    carry: jax.Array  # [B, H] recurrent policy state ([B, 0] for feed-forward policies)
    key: jax.Array
    updates: jax.Array
    metrics: dict[str, jax.Array]


@flax.struct.dataclass
class Step:
    """One env's step as the episode memory keeps it ([E, L, ...] in memory)."""

    obs: jax.Array
    next_obs: jax.Array
    action: jax.Array
    dist: Any  # The action distribution's parameters.
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


@flax.struct.dataclass
class Batch:
    """The episodes in memory as the update reads them, [rows, length, ...] each."""

    obs: jax.Array  # Normalised.
    action: jax.Array
    dist: Any
    old_log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array
    valid: jax.Array  # Whether a step belongs to an episode (not padding).


METRICS = (
    "train/policy_loss",
    "train/value_loss",
    "train/entropy",
    "train/kl",
    "train/penalty",
    "train/grad_norm",
)


def _step_example(networks: policy_lib.Networks, dist: Any) -> Step:
    obs = jnp.zeros(networks.observation_shape, jnp.float32)
    action_shape = () if networks.discrete else (networks.action_size,)
    action_dtype = jnp.int32 if networks.discrete else jnp.float32
    return Step(
        obs=obs,
        next_obs=obs,
        action=jnp.zeros(action_shape, action_dtype),
        dist=jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), dist),
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), bool),
        truncated=jnp.zeros((), bool),
    )


def init(networks: policy_lib.Networks, num_envs: int, key: jax.Array) -> State:
    """A fresh agent for `num_envs` envs."""
    config = networks.config
    params_key, key = jax.random.split(key)
    params = networks.init(params_key)
    obs = jnp.zeros((num_envs, *networks.observation_shape), jnp.float32)
    carry = networks.initial_carry(num_envs)
    _, dist = networks.step_distribution(params, carry, obs)
    example = _step_example(networks, dist)
    return State(
        params=params,
        opt_state=sgd.optimizer(config.learning_rate, config.max_grad_norm).init(params),
        obs_norm=normalizer.init(networks.observation_shape),
        reward_norm=normalizer.init(()),
        memory=memory.init(example, num_envs, config.update_every, config.max_length),
        penalty=jnp.asarray(config.kl_init_penalty, jnp.float32),
        action=jnp.zeros((num_envs, *example.action.shape), example.action.dtype),
        dist=dist,
        carry=carry,
        key=key,
        updates=jnp.zeros((), jnp.int32),
        metrics={name: jnp.zeros((), jnp.float32) for name in METRICS},
    )


def agent(networks: policy_lib.Networks) -> simulate.Agent:
    """The training agent's functions for simulate: sampling, episode memory, updating."""

    def begin_episode(state: State, mask: jax.Array) -> State:
        # Episodes that ended were moved to memory by end_episode (their buffers are empty).
        # One cut short by a reset (switching phases) is kept, as truncated at its last step.
        fresh = networks.initial_carry(mask.shape[0])
        carry = jnp.where(mask[:, None], fresh, state.carry)
        return state.replace(memory=memory.finish(state.memory, mask), carry=carry)

    def perform(state: State, obs: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        obs = networks.normalize_obs(state.obs_norm, obs)
        carry, dist = networks.step_distribution(state.params, state.carry, obs)
        action = networks.sample(dist, key)
        return state.replace(action=action, dist=dist, carry=carry), networks.to_env(action)

    def experience(state: State, transition: types.Transition) -> State:
        obs = transition.obs.astype(jnp.float32)
        step = Step(
            obs=obs,
            next_obs=transition.next_obs.astype(jnp.float32),
            action=state.action,
            dist=state.dist,
            reward=transition.reward.astype(jnp.float32),
            terminated=transition.terminated,
            truncated=transition.truncated,
        )
        return state.replace(
            memory=memory.append(state.memory, step),
            obs_norm=normalizer.update(state.obs_norm, obs),
            reward_norm=normalizer.update(state.reward_norm, step.reward),
        )

    def end_episode(state: State, mask: jax.Array) -> State:
        state = state.replace(memory=memory.finish(state.memory, mask))
        full = memory.full(state.memory)
        # Only what an update changes passes through the cond: with the episode memory
        # among its operands XLA copied the memory at every step (hundreds of MB for
        # Humanoid), which cost more than the updates themselves.
        learned = jax.lax.cond(full, lambda s: update(networks, s), _unchanged, state)
        return state.replace(**learned, memory=memory.clear(state.memory, when=full))

    return simulate.Agent(begin_episode, perform, experience, end_episode)


_LEARNED = ("params", "opt_state", "penalty", "key", "updates", "metrics")


def _unchanged(state: State) -> dict[str, Any]:
    return {name: getattr(state, name) for name in _LEARNED}


def _advantages(networks: policy_lib.Networks, state: State, data: Step, valid: jax.Array):
    """Advantages and value targets [E, L] of the episodes in memory (obs normalised)."""
    config = networks.config
    episodes, length = data.reward.shape
    flat = lambda x: x.reshape((episodes * length, *x.shape[2:]))  # noqa: E731
    value = networks.value(state.params, flat(data.obs)).reshape(episodes, length)
    next_value = networks.value(state.params, flat(data.next_obs)).reshape(episodes, length)
    steps = jnp.arange(length)[None, :]
    last = steps == (state.memory.length[:, None] - 1)
    # An episode cut by the memory's max_length counts as truncated at its last kept step.
    done = (data.terminated | data.truncated | last) & valid
    terminated = data.terminated & valid
    reward = data.reward
    if config.normalize_rewards:
        reward = normalizer.normalize(
            state.reward_norm, reward, center=False, clip=config.reward_clip
        )
    reward = jnp.where(valid, reward, 0.0)
    if config.gae_lambda is None:
        target = jax.vmap(returns.discounted_return, in_axes=(0, 0, 0, 0, None))(
            reward, next_value, terminated, done, config.discount
        )
        advantage = target - value
    else:
        advantage = jax.vmap(returns.gae, in_axes=(0, 0, 0, 0, 0, None, None))(
            reward, value, next_value, terminated, done, config.discount, config.gae_lambda
        )
        target = advantage + value
    return losses.standardize(advantage, valid), jnp.where(valid, target, 0.0)


def update(networks: policy_lib.Networks, state: State) -> dict[str, Any]:
    """`update_epochs` passes over the episodes in memory, then the penalty rule.

    Returns the fields of `state` an update changes (params, optimiser state, penalty,
    key, update count, metrics); the caller clears the memory.
    """
    config = networks.config
    steps: Step = state.memory.memory
    valid = memory.valid_mask(state.memory)
    steps = steps.replace(
        obs=networks.normalize_obs(state.obs_norm, steps.obs),
        next_obs=networks.normalize_obs(state.obs_norm, steps.next_obs),
    )
    advantage, target = _advantages(networks, state, steps, valid)
    # Padding holds zeros, a Gaussian's std of 0 among them, whose log-probs and KLs are
    # NaN or infinite; a masked mean drops them, but not from the gradient, where 0 * NaN
    # is NaN. Padded steps get the first step's distribution (the memory is full here).
    dist = jax.tree.map(
        lambda x: jnp.where(valid.reshape(*valid.shape, *[1] * (x.ndim - 2)), x, x[0, 0]),
        steps.dist,
    )
    data = Batch(
        obs=steps.obs,
        action=steps.action,
        dist=dist,
        old_log_prob=networks.log_prob(dist, steps.action),
        advantage=advantage,
        target=target,
        valid=valid,
    )
    penalty = state.penalty

    def loss_fn(params: dict, batch: Batch) -> tuple[jax.Array, dict]:
        episodes, length = batch.valid.shape
        flat = lambda x: x.reshape((episodes * length, *x.shape[2:]))  # noqa: E731
        mask = flat(batch.valid)
        dist = jax.tree.map(flat, networks.episode_distribution(params, batch.obs))
        old = jax.tree.map(flat, batch.dist)
        log_prob = networks.log_prob(dist, flat(batch.action))
        kl = networks.kl(old, dist)
        policy_loss = losses.kl_penalty_policy_loss(
            log_prob,
            flat(batch.old_log_prob),
            flat(batch.advantage),
            kl,
            penalty,
            config.kl_target,
            config.kl_cutoff_factor,
            config.kl_cutoff_coef,
            mask,
        )
        value = networks.value(params, flat(batch.obs))
        value_loss = losses.value_loss(value, flat(batch.target), mask=mask)
        entropy = losses.masked_mean(networks.entropy(dist), mask)
        total = policy_loss + value_loss - config.entropy_coef * entropy
        return total, {
            "train/policy_loss": policy_loss,
            "train/value_loss": value_loss,
            "train/entropy": entropy,
            "train/kl": losses.masked_mean(kl, mask),
        }

    # Minibatches of `batch_size` chunks of `chunk_length` steps (whole episodes for a
    # recurrent policy, whose state must start at the episode's beginning). Only chunks
    # that hold steps are trained on: 60 Humanoid episodes of 38 steps fill 60 of the
    # 1,200 chunks of a 60 x 1,000-step memory.
    chunk = config.max_length if networks.recurrent else config.chunk
    rows = config.update_every * (config.max_length // chunk)
    data = jax.tree.map(lambda x: x.reshape(rows, chunk, *x.shape[2:]), data)
    valid_rows = data.valid.any(axis=1)
    batch_size = min(config.batch_size, rows)
    key, epoch_key = jax.random.split(state.key)
    params, opt_state, metrics = sgd.run_epochs(
        sgd.optimizer(config.learning_rate, config.max_grad_norm),
        state.params,
        state.opt_state,
        data,
        loss_fn,
        epoch_key,
        epochs=config.update_epochs,
        batch_size=batch_size,
        devices=config.learner_devices,
        valid_rows=valid_rows,
    )
    # The KL of the whole update, measured after it, drives the penalty rule.
    new_dist = networks.episode_distribution(params, data.obs)
    new_dist = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), new_dist)
    old_dist = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data.dist)
    kl = losses.masked_mean(networks.kl(old_dist, new_dist), data.valid.reshape(-1))
    used = sgd.used_minibatches(valid_rows, batch_size)  # The last epoch's steps.
    metrics = {name: losses.masked_mean(value[-1], used) for name, value in metrics.items()}
    metrics["train/kl"] = kl
    metrics["train/penalty"] = penalty
    return {
        "params": params,
        "opt_state": opt_state,
        "penalty": losses.update_penalty(penalty, kl, config.kl_target),
        "key": key,
        "updates": state.updates + 1,
        "metrics": metrics,
    }

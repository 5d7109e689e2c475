"""Clipped PPO: fixed steps per env, GAE, shuffled minibatches.

Each env contributes `steps_per_update` steps to a rollout [T, B] as it acts
(`recorder`); when it is full, acting stops and `learn` runs the update. Observations are
stored once, in the env's dtypes. Time limits are bootstrapped: a truncated step's
advantage uses the value of its final observation, which acting computed
(`Choice.next_value`, as Stable-Baselines3 does), as does the rollout's last row; every
other step's next value is that of the next row's observation, computed at the update.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.parts import normalizer, returns
from batchrl.ppo import acting, agent_networks, losses, sgd
from batchrl.ppo import config as config_lib
from batchrl.ppo import learner as learner_lib


@flax.struct.dataclass
class Rollout:
    """Steps [T, B] collected since the last update (raw observations and rewards).

    Attributes:
        obs: The observation tree, leaves [T, B, *leaf.shape] in the env's dtypes.
        action: [T, B, ...] the policy's action, before mapping onto the env's space.
        log_prob: [T, B] its log-probability when taken.
        reward: [T, B] float32.
        terminated: [T, B] bool.
        truncated: [T, B] bool.
        next_value: [T, B] float32, the value of the step's next observation under the
            acting parameters: read where that observation is not the next row's (a
            truncated step, the last row).
    """

    obs: Any
    action: jax.Array
    log_prob: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_value: jax.Array


@flax.struct.dataclass
class Storage:
    """The rollout buffer and how many of its steps are written."""

    rollout: Rollout
    position: jax.Array  # [] int32 steps written into the rollout


@flax.struct.dataclass
class ClippedState:
    """The clipped PPO agent: its learner, each env's running state, the rollout buffer."""

    learner: learner_lib.Learner
    running: acting.Running
    storage: Storage
    # Updates in the run's budget, where an annealed learning rate reaches zero. Static: the
    # update compiles as when the config held the budget; traced, it compiled otherwise and
    # changed runs in the last bits (a HalfCheetah seed ended at 7,471 instead of 8,219).
    total_updates: int = flax.struct.field(pytree_node=False)


METRICS = (
    "train/policy_loss",
    "train/value_loss",
    "train/entropy",
    "train/kl",
    "train/clip_fraction",
    "train/grad_norm",
    "train/learning_rate",
)


def init(
    networks: agent_networks.Networks, shape: config_lib.RunShape, key: jax.Array
) -> ClippedState:
    """A fresh agent for a run of `shape` (a ValueError when the config cannot train it)."""
    networks.config.check(shape)
    num_envs, steps = shape.num_envs, networks.config.steps_per_update
    choice = acting.choice_example(networks, num_envs)
    zeros = jnp.zeros((steps, num_envs), jnp.float32)
    falses = jnp.zeros((steps, num_envs), bool)
    rollout = Rollout(
        obs=acting.obs_zeros(networks, (steps, num_envs)),
        action=jnp.zeros((steps, *choice.action.shape), choice.action.dtype),
        log_prob=zeros,
        reward=zeros,
        terminated=falses,
        truncated=falses,
        next_value=zeros,
    )
    return ClippedState(
        learner=learner_lib.init(networks, key, METRICS),
        running=acting.running(networks, num_envs),
        storage=Storage(rollout=rollout, position=jnp.zeros((), jnp.int32)),
        total_updates=networks.config.total_updates(shape),
    )


def recorder(networks: agent_networks.Networks) -> simulate.Recorder:
    """Writes each step at the rollout's next row; ready once it holds `steps_per_update`."""

    def record(stored: Storage, step: simulate.StepRecord) -> Storage:
        transition, choice = step.transition, step.extra
        row = Rollout(
            obs=transition.obs,
            action=choice.action,
            log_prob=choice.log_prob,
            reward=transition.reward,
            terminated=transition.terminated,
            truncated=transition.truncated,
            next_value=choice.next_value,
        )
        t = stored.position
        rollout = jax.tree.map(lambda buffer, x: buffer.at[t].set(x), stored.rollout, row)
        return Storage(rollout=rollout, position=t + 1)

    def ready(stored: Storage) -> jax.Array:
        return _full(networks, stored)

    return simulate.Recorder(record=record, ready=ready)


def cut(state: ClippedState, when: jax.Array) -> ClippedState:
    """Marks every env's last stored step truncated where `when` holds (envs restarted).

    A restart between phases cuts the running episodes: their last steps are bootstrapped,
    and the steps after the restart do not continue them.
    """
    stored = state.storage
    last = jnp.maximum(stored.position - 1, 0)
    cut_now = when & (stored.position > 0)
    truncated = stored.rollout.truncated
    truncated = truncated.at[last].set(truncated[last] | cut_now)
    return state.replace(
        storage=stored.replace(rollout=stored.rollout.replace(truncated=truncated))
    )


def learn(
    networks: agent_networks.Networks, state: ClippedState, behind: bool = False
) -> ClippedState:
    """An update when the rollout is full, then an empty rollout.

    Only the learner passes through the update's condition; the rollout is only read.
    `behind` (the rollout was acted by an older policy) changes nothing: the ratio is
    taken against the log-probs stored while acting either way, and the KL it reports
    against the learner's policy at the update's start.
    """
    del behind
    learner = jax.lax.cond(
        _full(networks, state.storage),
        lambda: update(networks, state.learner, state.storage.rollout, state.total_updates),
        lambda: state.learner,
    )
    return clear(networks, state.replace(learner=learner))


def clear(networks: agent_networks.Networks, state: ClippedState) -> ClippedState:
    """The rollout emptied where it is full, as `learn` leaves it, untrained."""
    position = jnp.where(_full(networks, state.storage), 0, state.storage.position)
    return state.replace(storage=state.storage.replace(position=position))


def _full(networks: agent_networks.Networks, stored: Storage) -> jax.Array:
    """Whether the rollout holds `steps_per_update` steps: an update's worth."""
    return stored.position >= networks.config.steps_per_update


def holds_steps(state: ClippedState) -> jax.Array:
    """Whether the rollout holds steps; emptied, its rows are written before they are read."""
    return state.storage.position > 0


def update(
    networks: agent_networks.Networks,
    learner: learner_lib.Learner,
    rollout: Rollout,
    total_updates: int,
) -> learner_lib.Learner:
    """One PPO update on the full rollout: GAE, then epochs of shuffled minibatches."""
    config = networks.config
    steps, num_envs = rollout.reward.shape
    features = functools.partial(networks.features, learner.obs_norm)
    flat = lambda x: x.reshape((steps * num_envs, *x.shape[2:]))  # noqa: E731
    progress = learner.updates / total_updates  # Of the run's budget: the schedules' clock.
    discount = config.discount
    if config.final_discount is not None:  # Linear from `discount` at the first update.
        rise = config.final_discount - config.discount
        discount = config.discount + rise * jnp.minimum(progress, 1.0)

    def advantages(params: dict, value: jax.Array | None = None) -> dict[str, jax.Array]:
        return jax.tree.map(flat, estimate(networks, learner, rollout, params, discount, value))

    obs = jax.tree.map(flat, rollout.obs)
    # One pass of the networks over the rollout gives both the old policy and the values.
    old_dist, value = networks.distribution_and_value(learner.params, features(obs))
    data = {
        "obs": obs,
        "action": flat(rollout.action),
        "log_prob": flat(rollout.log_prob),
        "old_dist": old_dist,
        **advantages(learner.params, value.reshape(steps, num_envs)),
    }
    # CleanRL's anneal_lr: Adam's step scaled by 1 - updates/total, 1/N at the last of N.
    lr_scale = jnp.maximum(1.0 - progress, 0.0) if config.anneal_learning_rate else 1.0

    def loss_fn(params: dict, minibatch: dict) -> tuple[jax.Array, dict]:
        obs = features(minibatch["obs"])
        dist, value = networks.distribution_and_value(params, obs)
        log_prob = networks.log_prob(dist, minibatch["action"])
        advantage = minibatch["advantage"]
        if config.normalize_advantages:
            advantage = losses.standardize(advantage)
        policy_loss = losses.clipped_policy_loss(
            log_prob, minibatch["log_prob"], advantage, config.clip_ratio
        )
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
            "train/clip_fraction": losses.clip_fraction(
                log_prob, minibatch["log_prob"], config.clip_ratio
            ),
        }

    def refresh(params: dict, data: dict) -> dict:
        return {**data, **advantages(params)}

    key, epoch_key = jax.random.split(learner.key)
    params, opt_state, metrics = sgd.run_epochs(
        sgd.optimizer(config.learning_rate, config.max_grad_norm),
        learner.params,
        learner.opt_state,
        data,
        loss_fn,
        epoch_key,
        epochs=config.update_epochs,
        batch_size=rollout.reward.size // config.num_minibatches,
        refresh=refresh if config.recompute_advantages else None,
        target_kl=config.target_kl,
        step_scale=lr_scale,
        devices=config.learner_devices,
    )
    metrics = {name: value.mean() for name, value in metrics.items()}
    metrics["train/learning_rate"] = jnp.asarray(config.learning_rate * lr_scale, jnp.float32)
    return learner.replace(
        params=params, opt_state=opt_state, key=key, updates=learner.updates + 1, metrics=metrics
    )


def estimate(
    networks: agent_networks.Networks,
    learner: learner_lib.Learner,
    rollout: Rollout,
    params: dict,
    discount: float | jax.Array,
    value: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """GAE of the rollout under `params`: "advantage", "target" and "value", [T, B] each.

    `value`, [T, B], is the rollout's values under `params` when the caller has them.
    """
    config = networks.config
    steps, num_envs = rollout.reward.shape
    reward = rollout.reward
    if config.normalize_rewards:
        reward = normalizer.normalize(
            learner.reward_norm, reward, center=False, clip=config.reward_clip
        )
    if value is None:
        features = networks.features(learner.obs_norm, rollout.obs)
        value = networks.value(params, features.reshape(steps * num_envs, -1))
        value = value.reshape(steps, num_envs)
    done = rollout.terminated | rollout.truncated
    lambda_ = 1.0 if config.gae_lambda is None else config.gae_lambda
    gae = jax.vmap(returns.gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
    next_value = _next_value(value, rollout)
    advantage = gae(reward, value, next_value, rollout.terminated, done, discount, lambda_)
    return {"advantage": advantage, "target": advantage + value, "value": value}


def _next_value(value: jax.Array, rollout: Rollout) -> jax.Array:
    """[T, B] the value after each step: the next row's, or acting's where that is not it.

    A truncated step's next row begins a new episode, and the last row has none; there
    the value acting computed of the step's own next observation is used.
    """
    following = jnp.concatenate([value[1:], rollout.next_value[-1:]])
    return jnp.where(rollout.truncated, rollout.next_value, following)

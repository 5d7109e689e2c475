"""The seed's BatchPPO: episode memory and an adaptive KL penalty.

The envs write their episodes straight into the episode memory as they act
(`recorder`); once it holds `update_every` finished episodes, acting stops at that very
step and `learn` trains on them, then clears the memory. The objective is
-ratio * advantage + beta * KL(old||new) + kl_cutoff_coef * max(0, KL - cutoff)^2 with
cutoff = kl_cutoff_factor * kl_target, the last term on each row's KL (a chunk's, or a
recurrent policy's episode's), as the seed's; beta adapts after each update
(`losses.update_penalty`). Advantages are Monte-Carlo returns minus values (GAE when
gae_lambda is set), standardised; a truncated episode (or one cut by the memory's
max_length) is bootstrapped from the value of the observation after its last stored
step, which acting computed (`Choice.next_value`); within an episode, a step's next
value is that of the next stored step. Observations are stored once, in the env's
dtypes. Each epoch runs over the chunks of the memory that hold steps of finished
episodes, not over padding or running episodes.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.parts import episode_memory, normalizer, returns
from batchrl.ppo import acting, agent_networks, losses, sgd
from batchrl.ppo import config as config_lib
from batchrl.ppo import learner as learner_lib


@flax.struct.dataclass
class PenaltyState:
    """The KL-penalty agent: its learner, each env's running state, the episode memory."""

    learner: learner_lib.Learner
    running: acting.Running
    storage: episode_memory.MemoryState
    penalty: jax.Array  # [] the KL penalty coefficient beta


@flax.struct.dataclass
class MemoryStep:
    """One env's step as the episode memory keeps it ([slots, L, ...] in memory).

    Attributes:
        obs: The observation tree, leaves [*leaf.shape] in the env's dtypes.
        action: The policy's action.
        dist: The action distribution's parameters.
        reward: [] float32.
        terminated: [] bool.
        truncated: [] bool.
        next_value: [] float32, the value of the observation after the step under the
            acting parameters: read at an episode's last stored step only.
    """

    obs: Any
    action: jax.Array
    dist: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_value: jax.Array


@flax.struct.dataclass
class Batch:
    """The episodes in memory as the update reads them, [rows, length, ...] each."""

    obs: Any  # As stored; the loss makes features of them.
    action: jax.Array
    dist: Any  # The distributions the KL is taken against.
    old_log_prob: jax.Array  # Of the action under the distribution that acted.
    advantage: jax.Array
    target: jax.Array
    valid: jax.Array  # Whether a step belongs to a finished episode (not padding).


METRICS = (
    "train/policy_loss",
    "train/value_loss",
    "train/entropy",
    "train/kl",
    "train/penalty",
    "train/grad_norm",
)


def init(
    networks: agent_networks.Networks, shape: config_lib.RunShape, key: jax.Array
) -> PenaltyState:
    """A fresh agent for a run of `shape` (a ValueError when the config cannot train it)."""
    config = networks.config
    config.check(shape)
    num_envs = shape.num_envs
    choice = acting.choice_example(networks, 1)
    example = MemoryStep(
        obs=acting.obs_zeros(networks, ()),
        action=choice.action[0],
        dist=jax.tree.map(lambda x: x[0], choice.dist),
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), bool),
        truncated=jnp.zeros((), bool),
        next_value=jnp.zeros((), jnp.float32),
    )
    return PenaltyState(
        learner=learner_lib.init(networks, key, METRICS),
        running=acting.running(networks, num_envs),
        storage=episode_memory.init(
            example, num_envs, config.update_every, config.memory_length(shape.max_length)
        ),
        penalty=jnp.asarray(config.kl_init_penalty, jnp.float32),
    )


def recorder(networks: agent_networks.Networks) -> simulate.Recorder:
    """Writes each step into its env's memory slot; ready once `update_every` episodes ended.

    The memory is ready at the very step the last of them ends, as in the seed, where
    `end_episode` trained inside that step.
    """
    del networks

    def record(
        stored: episode_memory.MemoryState, step: simulate.StepRecord
    ) -> episode_memory.MemoryState:
        transition, choice = step.transition, step.extra
        kept = MemoryStep(
            obs=transition.obs,
            action=choice.action,
            dist=choice.dist,
            reward=transition.reward,
            terminated=transition.terminated,
            truncated=transition.truncated,
            next_value=choice.next_value,
        )
        stored = episode_memory.append(episode_memory.begin(stored, step.begin), kept)
        return episode_memory.finish(stored, transition.terminated | transition.truncated)

    return simulate.Recorder(record=record, ready=episode_memory.full)


def cut(state: PenaltyState, when: jax.Array) -> PenaltyState:
    """Ends every running episode where `when` holds (envs restarted between phases).

    Each is kept as cut at its last step (bootstrapped from there), as the seed kept an
    episode interrupted by a reset.
    """
    ended = jnp.full(state.storage.slot.shape, when, bool)
    return state.replace(storage=episode_memory.finish(state.storage, ended))


def learn(
    networks: agent_networks.Networks, state: PenaltyState, behind: bool = False
) -> PenaltyState:
    """An update when the memory holds `update_every` finished episodes, then a clear memory.

    Only the learner and the penalty pass through the update's condition; the memory is
    read there, never copied. `behind`: the episodes were acted by an older policy than
    the learner's (`update`).
    """
    full = episode_memory.full(state.storage)
    learner, penalty = jax.lax.cond(
        full,
        lambda: update(networks, state.learner, state.storage, state.penalty, behind),
        lambda: (state.learner, state.penalty),
    )
    return clear(networks, state.replace(learner=learner, penalty=penalty))


def clear(networks: agent_networks.Networks, state: PenaltyState) -> PenaltyState:
    """The memory's finished episodes freed where it is full, as `learn` leaves it, untrained.

    Running episodes stay in their slots, so acting goes on writing them.
    """
    del networks
    full = episode_memory.full(state.storage)
    return state.replace(storage=episode_memory.clear(state.storage, when=full))


def holds_steps(state: PenaltyState) -> jax.Array:
    """Always: the memory carries the running episodes from one phase into the next."""
    del state
    return jnp.asarray(True)


def estimate(
    networks: agent_networks.Networks,
    learner: learner_lib.Learner,
    stored: episode_memory.MemoryState,
    value: jax.Array,
    valid: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Advantages (standardised) and value targets [slots, L] of the finished episodes.

    `value` [slots, L] is V of each stored step's observation; `valid` marks the steps
    of finished episodes.
    """
    config = networks.config
    data: MemoryStep = stored.steps
    last = jnp.arange(stored.max_length)[None, :] == (stored.length[:, None] - 1)
    # The next stored step's value; acting's value of the next observation after the last.
    following = jnp.concatenate([value[:, 1:], data.next_value[:, -1:]], axis=1)
    next_value = jnp.where(last, data.next_value, following)
    # An episode cut by the memory's max_length counts as truncated at its last kept step.
    done = (data.terminated | data.truncated | last) & valid
    terminated = data.terminated & valid
    reward = data.reward
    if config.normalize_rewards:
        reward = normalizer.normalize(
            learner.reward_norm, reward, center=False, clip=config.reward_clip
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


def update(
    networks: agent_networks.Networks,
    learner: learner_lib.Learner,
    stored: episode_memory.MemoryState,
    penalty: jax.Array,
    behind: bool = False,
) -> tuple[learner_lib.Learner, jax.Array]:
    """`update_epochs` passes over the finished episodes in memory, then the penalty rule.

    The ratio is taken against the log-probs of the distributions stored while acting,
    and so is the KL, which the penalty and its cutoff hold near `kl_target`. With
    `behind`, the episodes were acted one policy version before the learner's
    (`training.overlap`): the KL is then taken against the learner's own policy at the
    update's start, the step the penalty rule is made to size, while the ratio still
    corrects for the policy that acted. Against the stored distributions, the lag alone
    made the KL pass the cutoff, whose gradient then stalled the policy (Pendulum seeds
    1-3 stayed near -1,100, as a random policy scores).

    The memory is read in rows of `chunk_length` steps (whole episodes for a recurrent
    policy, whose state must start at the episode's beginning), and only rows that hold
    steps of finished episodes are computed on: short episodes fill few rows of a memory
    sized for the longest (computed on those rows only, a `humanoid` update took 0.89 s;
    on the whole 90 x 1,000-step memory, 1.49 s).
    Returns the learner after the update and the next penalty coefficient; the caller
    clears the memory.
    """
    config = networks.config
    valid = episode_memory.valid_mask(stored)
    # Padding holds zeros (a Gaussian's std of 0 among them, whose log-probs and KLs are
    # NaN or infinite) or steps of earlier episodes; a masked mean drops them, but not
    # from the gradient, where 0 * NaN is NaN. Padded steps get a valid step's distribution.
    dist = _valid_everywhere(stored.steps.dist, valid)
    chunk = config.chunk(stored.max_length)
    rows = stored.slots * (stored.max_length // chunk)
    as_rows = lambda x: x.reshape(rows, chunk, *x.shape[2:])  # noqa: E731
    steps = jax.tree.map(as_rows, stored.steps.replace(dist=dist))
    valid_rows = as_rows(valid).any(axis=1)
    batch_size = min(config.batch_size, rows)
    features = functools.partial(networks.features, learner.obs_norm)

    def flat(x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

    def evaluate(part: MemoryStep) -> tuple[Any, ...]:
        shape = part.reward.shape
        obs = features(part.obs)
        value = networks.value(learner.params, flat(obs)).reshape(shape)
        log_prob = networks.log_prob(jax.tree.map(flat, part.dist), flat(part.action))
        # The policy the KL is taken against: the learner's own when the episodes lag it.
        anchor = networks.episode_distribution(learner.params, obs) if behind else ()
        return value, log_prob.reshape(shape), anchor

    value, old_log_prob, anchor = sgd.map_rows(evaluate, steps, valid_rows, batch_size)
    if behind:  # Rows map_rows skipped hold zeros: padded steps take a valid step's, as above.
        anchor = jax.tree.map(lambda x: x.reshape(valid.shape + x.shape[2:]), anchor)
        anchor = jax.tree.map(as_rows, _valid_everywhere(anchor, valid))
    advantage, target = estimate(networks, learner, stored, value.reshape(valid.shape), valid)
    data = Batch(
        obs=steps.obs,
        action=steps.action,
        dist=anchor if behind else steps.dist,
        old_log_prob=old_log_prob,
        advantage=as_rows(advantage),
        target=as_rows(target),
        valid=as_rows(valid),
    )

    def loss_fn(params: dict, batch: Batch) -> tuple[jax.Array, dict]:
        mask = batch.valid  # [rows, chunk]: the policy loss's KL cutoff is a row's.
        obs = features(batch.obs)
        dist = jax.tree.map(flat, networks.episode_distribution(params, obs))
        old = jax.tree.map(flat, batch.dist)
        log_prob = networks.log_prob(dist, flat(batch.action)).reshape(mask.shape)
        kl = networks.kl(old, dist).reshape(mask.shape)
        policy_loss = losses.kl_penalty_policy_loss(
            log_prob,
            batch.old_log_prob,
            batch.advantage,
            kl,
            penalty,
            config.kl_target,
            config.kl_cutoff_factor,
            config.kl_cutoff_coef,
            mask,
        )
        value = networks.value(params, flat(obs)).reshape(mask.shape)
        value_loss = losses.value_loss(value, batch.target, mask=mask)
        entropy = losses.masked_mean(networks.entropy(dist).reshape(mask.shape), mask)
        total = policy_loss + value_loss - config.entropy_coef * entropy
        return total, {
            "train/policy_loss": policy_loss,
            "train/value_loss": value_loss,
            "train/entropy": entropy,
            "train/kl": losses.masked_mean(kl, mask),
        }

    key, epoch_key = jax.random.split(learner.key)
    params, opt_state, metrics = sgd.run_epochs(
        sgd.optimizer(config.learning_rate, config.max_grad_norm),
        learner.params,
        learner.opt_state,
        data,
        loss_fn,
        epoch_key,
        epochs=config.update_epochs,
        batch_size=batch_size,
        devices=config.learner_devices,
        valid_rows=valid_rows,
    )

    def new_kl(part: Batch) -> jax.Array:
        new = networks.episode_distribution(params, features(part.obs))
        return networks.kl(part.dist, new)

    # The KL of the whole update, measured after it, drives the penalty rule.
    kl = losses.masked_mean(sgd.map_rows(new_kl, data, valid_rows, batch_size), data.valid)
    used = sgd.used_minibatches(valid_rows, batch_size)  # The last epoch's steps.
    metrics = {name: losses.masked_mean(value[-1], used) for name, value in metrics.items()}
    metrics["train/kl"] = kl
    metrics["train/penalty"] = penalty
    learner = learner.replace(
        params=params,
        opt_state=opt_state,
        key=key,
        updates=learner.updates + 1,
        metrics=metrics,
    )
    return learner, losses.update_penalty(penalty, kl, config.kl_target)


def _valid_everywhere(dist: Any, valid: jax.Array) -> Any:
    """`dist` [slots, L, ...] with the first valid step's parameters at every invalid step."""
    first = jnp.unravel_index(jnp.argmax(valid), valid.shape)
    return jax.tree.map(
        lambda x: jnp.where(valid.reshape(*valid.shape, *[1] * (x.ndim - 2)), x, x[first]), dist
    )

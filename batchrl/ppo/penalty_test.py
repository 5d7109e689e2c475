import dataclasses
import functools

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from batchrl import bridge
from batchrl.envs import BatchEnv, spaces
from batchrl.envs.jax import classic, jax_env
from batchrl.parts import episode_memory, normalizer
from batchrl.ppo import acting, agent_networks, clipped_test, penalty
from batchrl.ppo import config as config_lib
from batchrl.ppo import learner as learner_lib
from batchrl.testing import loop_runs
from batchrl.training import loop


@pytest.mark.slow
@pytest.mark.optimized
def test_pendulum_learns_with_the_seeds_objective():
    # 210k env steps, 7 updates. Seeds 0-5 evaluated -119, -207, -317, -170, -199 and
    # -189 (random play: about -1200): the threshold holds with a margin of 80 over each.
    config = config_lib.PenaltyConfig(discount=0.95)
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), 30)
    metrics, _ = loop_runs.train(config, env, 1000, 200, phases=7, max_length=200)
    assert metrics[-1]["train/count"] == 150  # 5 episodes of 30 envs per phase
    assert metrics[-1]["eval/return"] >= -400, [m["eval/return"] for m in metrics]


@pytest.mark.slow
def test_memory_fills_then_trains_and_the_penalty_adapts():
    config = config_lib.PenaltyConfig(update_every=4, batch_size=2, update_epochs=2)
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), 4)
    env = dataclasses.replace(env, env=jax_env.TimeLimit(env.env.env, 20))
    metrics, run_state = loop_runs.train(config, env, 20, 20, phases=3, max_length=20)
    state = run_state.agent
    assert int(state.learner.updates) == 3  # One full memory (4 episodes of 20 steps) a phase.
    assert int(state.storage.count) == 0
    kl, penalty = metrics[-1]["train/kl"], metrics[-1]["train/penalty"]
    expected = penalty * 1.5 if kl > 0.013 else penalty / 1.5 if kl < 0.007 else penalty
    assert float(state.penalty) == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_episodes_shorter_than_the_memory_train_without_nan():
    # Pendulum's 20-step episodes in a memory of 40 steps: half of every row is padding,
    # whose zero std once turned the whole update into NaN (Reacher-v5's 50-step
    # episodes in the seed preset's max_length of 1000).
    config = config_lib.PenaltyConfig(update_every=4, update_epochs=2)
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 20), 4)
    metrics, state = loop_runs.train(config, env, 20, 20, phases=2, max_length=40)
    assert int(state.agent.learner.updates) == 2
    assert all(np.isfinite(v) for m in metrics for v in m.values()), metrics
    params = jax.tree.leaves(state.agent.learner.params)
    assert all(bool(jnp.isfinite(p).all()) for p in params)


@pytest.mark.slow
def test_a_nan_stops_training_with_the_quantity_and_step():
    config = config_lib.PenaltyConfig(update_every=2, learning_rate=1e30)
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 10), 2)
    run = loop_runs.config_for(config, env, max_length=10, steps=400)
    programs, state = loop.build(run, env, train_steps=10, eval_steps=10)
    message = r"^parameters \(nan\), .*train/policy_loss \(nan\).* became non-finite by env step"
    with pytest.raises(FloatingPointError, match=message):
        for _ in range(20):
            state, _ = loop.run_phase(programs, state, eval_episodes=1)


def test_a_non_finite_normaliser_points_at_the_envs_numbers_not_the_learning_rate():
    # An env's None reward reached the normaliser as NaN, and the error said to lower the
    # learning rate first.
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 10), 2)
    run = loop_runs.config_for(
        config_lib.PenaltyConfig(update_every=2), env, max_length=10, steps=40
    )
    learner = loop.build(run, env, train_steps=10, eval_steps=10)[1].agent.learner
    nan = lambda x: jnp.full_like(x, jnp.nan) if jnp.issubdtype(x.dtype, jnp.floating) else x  # noqa: E731
    zeros = {name: 0.0 for name in learner.metrics}
    broken = learner.replace(reward_norm=jax.tree.map(nan, learner.reward_norm))
    said = r"^reward_norm statistics \(nan\) became .*; the env's rewards reached the normaliser"
    with pytest.raises(FloatingPointError, match=said):
        learner_lib.check_finite(broken, zeros, 40)
    # Observations of 1e30: finite, too large for float32 statistics, named by element.
    huge = normalizer.update(learner.obs_norm, jnp.array([[1.0, 1e30, 0.0]]))
    said = (
        r"^obs_norm statistics \(nan\) became non-finite by env step 40; the env's "
        r"observations obs\[1\] reached the normaliser too large for float32 statistics"
    )
    with pytest.raises(FloatingPointError, match=said):
        learner_lib.check_finite(learner.replace(obs_norm=huge), zeros, 40)
    broken = learner.replace(params=jax.tree.map(nan, learner.params))
    with pytest.raises(FloatingPointError, match=r"^parameters \(nan\) .*; lower the learning"):
        learner_lib.check_finite(broken, zeros, 40)
    # A NaN reward made the parameters NaN mid-phase, whose NaN actions made the env's
    # observations NaN: the rewards are named first, the observations as what may follow.
    everything = broken.replace(
        obs_norm=jax.tree.map(nan, learner.obs_norm),
        reward_norm=jax.tree.map(nan, learner.reward_norm),
    )
    said = (
        r"; the env's rewards reached the normaliser non-finite .*: check them; the env's "
        r"observations obs\[0\], .* non-finite .*: check them \(or the non-finite actions of "
        r"non-finite parameters made them so\)$"
    )
    with pytest.raises(FloatingPointError, match=said):
        learner_lib.check_finite(everything, zeros, 40)


# gym.make itself, not a function of this module, which each worker would import (and JAX).
_CHEETAH = functools.partial(gym.make, "HalfCheetah-v5", max_episode_steps=50)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_short_run_on_halfcheetah_in_worker_processes(objective):
    if objective == "clipped":
        config = config_lib.ClippedConfig(steps_per_update=50, num_minibatches=4, update_epochs=2)
    else:
        config = config_lib.PenaltyConfig(update_every=4, update_epochs=2)
    with BatchEnv.external(_CHEETAH, 4) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        metrics, state = loop_runs.train(config, env, 100, 50, phases=2, max_length=50)
    assert int(state.agent.learner.updates) == 4
    assert metrics[-1]["eval/count"] == 4 and metrics[-1]["train/count"] == 8
    assert all(np.isfinite(v) for m in metrics for v in m.values())
    low = jnp.asarray(env.env_spec.action_low)
    assert low.shape == (6,)


@pytest.mark.slow
def test_recurrent_policy_trains_and_resets_its_state_at_episode_start():
    config = config_lib.PenaltyConfig(
        update_every=4, batch_size=2, update_epochs=2, recurrent=True, policy_layers=(32, 16)
    )
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 20), 4)
    metrics, state = loop_runs.train(config, env, 20, 20, phases=2, max_length=20)
    assert int(state.agent.learner.updates) == 2
    assert all(np.isfinite(m["train/policy_loss"]) for m in metrics)
    networks = agent_networks.for_env(config, env)
    running = state.agent.running.replace(carry=jnp.ones((4, 16)))
    carried = acting.begin(state.agent.learner, running)
    starting = jnp.array([True, False, True, False])
    fresh = networks.initial_carry(4)
    for agent in (acting.sampling_agent(networks), acting.evaluation_agent(networks)):
        begun = agent.begin_episode(carried, starting).running
        np.testing.assert_array_equal(begun.carry[starting], fresh[starting])
        np.testing.assert_array_equal(begun.carry[~starting], running.carry[~starting])


def test_recurrent_needs_the_penalty_objective_and_box_actions():
    env = jax_env.VmapBatch(classic.make("CartPole-v1"), 2)
    with pytest.raises(ValueError, match=r"^recurrent policies act in one Box of float32 or float"):
        run = loop_runs.config_for(
            config_lib.PenaltyConfig(recurrent=True), env, max_length=10, steps=1
        )
        loop.build(run, env)
    # A Box of integers is a Box the user sees, which the message must not seem to allow.
    spec = spaces.env_spec(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0, 5, (2,), np.int64))
    with pytest.raises(ValueError, match=r", not a tree of leaves vector int64; set recurrent="):
        agent_networks.Networks(config_lib.PenaltyConfig(recurrent=True), spec)
    with pytest.raises(TypeError, match="unexpected keyword argument 'recurrent'"):
        config_lib.ClippedConfig(recurrent=True)  # The clipped objective has no such setting.


def test_an_episode_limit_chunks_do_not_divide_is_kept_in_whole_chunks():
    # An env's own limit sets max_length (MountainCarContinuous's 999, a JAX-native env's
    # 60), which the preset's chunk_length of 50 did not divide: the run was refused.
    config = config_lib.PenaltyConfig(chunk_length=50, update_every=2)
    assert [config.memory_length(n) for n in (60, 100, 999, 30)] == [100, 100, 1000, 30]
    recurrent = config_lib.PenaltyConfig(chunk_length=50, recurrent=True)
    assert recurrent.memory_length(999) == 999  # A whole episode a row.
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 60), 4)
    run = loop_runs.config_for(config, env, max_length=60, steps=480)
    programs, state = loop.build(run, env, train_steps=120, eval_steps=60)
    assert state.agent.storage.max_length == 100
    for _ in range(2):
        state, metrics = loop.run_phase(programs, state, eval_episodes=1)
    assert int(state.agent.learner.updates) == 4 and metrics["train/length"] == 60
    assert all(np.isfinite(metrics[name]) for name in penalty.METRICS)
    assert config_lib.PenaltyConfig(chunk_length=500).chunk(200) == 200
    assert config_lib.PenaltyConfig(chunk_length=50, recurrent=True).chunk(200) == 200


@pytest.mark.slow
@pytest.mark.parametrize(
    ("episode", "max_length", "chunk_length", "batch_size"),
    [
        # 4 episodes of 20 steps in chunks of 5: 16 rows, 4 minibatches of 4 an epoch
        # (1 if whole episodes were rows).
        (20, 20, 5, 4),
        # Episodes of 15 steps in a 40-step memory in chunks of 10: each fills two of its
        # four chunks, so an epoch runs 8 rows in 4 minibatches of 2, not 16 rows in 8.
        (15, 40, 10, 2),
    ],
)
def test_updates_in_minibatches_of_the_chunks_that_hold_steps(
    episode, max_length, chunk_length, batch_size
):
    # Two updates of two epochs of 4 minibatches: 16 Adam steps (32 with the padding).
    config = config_lib.PenaltyConfig(
        chunk_length=chunk_length, update_every=4, batch_size=batch_size, update_epochs=2
    )
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, episode), 4)
    metrics, state = loop_runs.train(config, env, episode, episode, phases=2, max_length=max_length)
    assert int(state.agent.learner.updates) == 2
    assert int(optax.tree.get(state.agent.learner.opt_state, "count")) == 16
    assert all(np.isfinite(v) for m in metrics for v in m.values()), metrics


def test_an_episodes_last_stored_step_bootstraps_from_the_value_acting_computed():
    # A truncated 3-step episode, and a 6-step one cut by the memory's 4 steps: each
    # bootstraps its last stored step from acting's value of the observation after it;
    # every other step's next value is the next stored step's.
    config = config_lib.PenaltyConfig(
        update_every=2, normalize_rewards=False, gae_lambda=0.5, discount=0.9
    )
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), 1)
    networks = agent_networks.for_env(config, env)
    shape = config_lib.RunShape(num_envs=1, max_length=4, steps=100)
    state = penalty.init(networks, shape, jax.random.key(0))
    stored = episode_memory.begin(state.storage, jnp.array([True]))
    example = jax.tree.map(lambda x: x[0, :1], stored.steps)
    for episode, steps in ((0, 3), (1, 6)):
        if episode:
            stored = episode_memory.begin(stored, jnp.array([True]))
        for t in range(steps):
            step = example.replace(
                reward=jnp.array([1.0 + t + 10 * episode]),
                truncated=jnp.array([episode == 0 and t == steps - 1]),
                next_value=jnp.array([100.0 + t + 10 * episode]),
            )
            stored = episode_memory.append(stored, step)
        stored = episode_memory.finish(stored, jnp.array([True]))
    assert stored.length.tolist() == [3, 4, 0]
    valid = episode_memory.valid_mask(stored)
    value = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 4.0
    _, target = penalty.estimate(networks, state.learner, stored, value, valid)
    value, reward = np.asarray(value, np.float64), np.asarray(stored.steps.reward, np.float64)
    acting_value = np.asarray(stored.steps.next_value, np.float64)
    for slot, length in ((0, 3), (1, 4)):
        next_value = [
            acting_value[slot, t] if t == length - 1 else value[slot, t + 1] for t in range(length)
        ]
        done = np.arange(length) == length - 1
        advantage = clipped_test.python_gae(
            reward[slot, :length], value[slot, :length], next_value, [False] * length, done,
            0.9, 0.5,
        )  # fmt: skip
        np.testing.assert_allclose(target[slot, :length], advantage + value[slot, :length], 1e-5)
    np.testing.assert_array_equal(target[2], 0.0)  # No episode there.

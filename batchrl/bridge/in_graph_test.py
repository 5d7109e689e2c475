import functools
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import bridge
from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs import BatchEnv
from batchrl.envs.host import errors, mock


def test_jitted_steps_match_stepping_the_batch_directly():
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 3, 6)).astype(np.float32)
    with BatchEnv.external("HalfCheetah-v5", 3) as direct:
        obs, _ = direct.reset(seed=7)
        expected = [obs]
        for action in actions:
            expected.append(direct.step(action)[0])
    with BatchEnv.external("HalfCheetah-v5", 3, envs_per_worker=2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=7)
        state, obs = jax.jit(env.init)(jax.random.key(0))
        assert obs.dtype == jnp.float32  # MuJoCo's float64 observations arrive as float32.
        step = jax.jit(env.step)
        seen = [obs]
        for action in actions:
            state, time_step = step(state, jnp.asarray(action))
            seen.append(time_step.obs)
        np.testing.assert_allclose(np.array(seen), np.array(expected), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state.action, actions[-1])
        assert int(state.token) == 21


def test_discrete_actions_and_masked_reset():
    with BatchEnv.external(lambda: gym.make("CartPole-v1"), 4) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        assert env.env_spec == EnvSpec(
            env_spec_lib.vector((4,)), True, num_actions=2, action_start=(0,)
        )
        state, _ = env.init(jax.random.key(0))
        state, time_step = env.step(state, jnp.array([0, 1, 0, 1]))
        assert time_step.reward.dtype == jnp.float32
        np.testing.assert_array_equal(time_step.reward, [1.0] * 4)
        mask = jnp.array([True, False, False, True])
        state, fresh = env.reset(state, time_step.obs, jax.random.key(1), mask)
        np.testing.assert_array_equal(fresh[1:3], time_step.obs[1:3])
        assert not np.array_equal(fresh[0], time_step.obs[0])


def test_wrong_action_shape_is_refused_at_trace_time():
    with BatchEnv.external(functools.partial(mock.CountingEnv), 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        state, _ = env.init(jax.random.key(0))
        with pytest.raises(ValueError, match=r"action has shape \(3, 2\), expected \(2, 2\)"):
            env.step(state, jnp.zeros((3, 2)))


def test_an_env_exception_in_compiled_code_is_raised_as_itself():
    constructor = functools.partial(mock.FailingEnv, how="raise", at=2)
    with BatchEnv.external(constructor, 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)

        @bridge.surface_errors
        @jax.jit
        def two_steps(state):
            state, _ = env.step(state, jnp.zeros((2, 2)))
            return env.step(state, jnp.zeros((2, 2)))[0]

        state, _ = env.init(jax.random.key(0))
        with pytest.raises(errors.EnvRaisedError, match="FailingEnv failed on purpose in step"):
            two_steps(state)


def test_env_seconds_counts_the_time_spent_in_the_envs():
    constructor = functools.partial(mock.CountingEnv, step_seconds=0.01)
    with BatchEnv.external(constructor, 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        state, _ = env.init(jax.random.key(0))
        step = jax.jit(env.step)
        state, _ = jax.block_until_ready(step(state, jnp.zeros((2, 2))))  # Compiled.
        before, start = env.env_seconds, time.perf_counter()
        for _ in range(5):
            state, _ = step(state, jnp.zeros((2, 2)))
        jax.block_until_ready(state)
        assert 0.05 <= env.env_seconds - before <= time.perf_counter() - start


def test_an_interrupt_in_jaxs_part_of_a_host_call_is_raised_as_keyboard_interrupt():
    from jax.experimental.buffer_callback import buffer_callback

    def interrupted(ctx, out):
        raise KeyboardInterrupt("signal SIGTERM")  # As if it landed outside the bridge's code.

    call = buffer_callback(interrupted, jax.ShapeDtypeStruct((), np.int32), has_side_effect=True)
    with pytest.raises(KeyboardInterrupt, match="signal SIGTERM"):
        bridge.surface_errors(jax.jit(call))()

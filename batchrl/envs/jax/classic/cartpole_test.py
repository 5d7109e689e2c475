import functools

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.envs import spaces
from batchrl.envs.jax import jax_env
from batchrl.envs.jax.classic import cartpole, make

ENV = cartpole.CartPole()
X, THETA = cartpole.X_THRESHOLD, cartpole.THETA_THRESHOLD


_step_many = jax.jit(jax.vmap(ENV.step))
_rollout = jax.jit(lambda state, actions: jax_env.rollout_batch(ENV, state, actions)[1])


def _sample_states(rng, count):
    """[count, 4] float32 states inside the thresholds; half of them within one step of one."""
    states = np.stack(
        [
            rng.uniform(-X, X, count),
            rng.uniform(-3, 3, count),
            rng.uniform(-THETA, THETA, count),
            rng.uniform(-3.5, 3.5, count),
        ],
        axis=1,
    )
    # One step moves x by up to 0.02 * 3 and theta by up to 0.02 * 3.5.
    near_x, near_theta = np.arange(count // 4), np.arange(count // 4, count // 2)
    states[near_x, 0] = rng.choice([-1, 1], len(near_x)) * (X - rng.uniform(0, 0.06, len(near_x)))
    states[near_theta, 2] = rng.choice([-1, 1], len(near_theta)) * (
        THETA - rng.uniform(0, 0.07, len(near_theta))
    )
    return states.astype(np.float32)


def _gym_step(gym_env, gym_state, action):
    gym_env.state = np.asarray(gym_state, np.float64)
    gym_env.steps_beyond_terminated = None
    obs, reward, terminated, truncated, _ = gym_env.step(int(action))
    return obs, reward, terminated, truncated


def test_one_step_matches_gymnasium_over_sampled_states_and_actions():
    rng = np.random.default_rng(0)
    states, actions = _sample_states(rng, 500), rng.integers(0, 2, 500)
    gym_env = gym.make("CartPole-v1").unwrapped
    expected = [_gym_step(gym_env, s, a) for s, a in zip(states, actions, strict=True)]
    obs, reward, terminated, truncated = (np.array(x) for x in zip(*expected, strict=True))
    # Both ways of ending occur often, most of them from the states near a threshold.
    assert 50 < terminated.sum() < 450

    _, time_step = _step_many(cartpole.state_from_gym(states), jnp.asarray(actions))
    np.testing.assert_allclose(time_step.obs, obs, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(time_step.reward, reward)
    np.testing.assert_array_equal(time_step.terminated, terminated)
    np.testing.assert_array_equal(time_step.truncated, truncated)
    assert time_step.obs.dtype == jnp.float32 and time_step.reward.dtype == jnp.float32


def _gym_episodes(actions):
    """Gymnasium episodes from reset(seed=i) under actions [T, B], each up to its termination.

    Returns the start states [B, 4], the float64 states after each step [T, B, 4] (the obs
    before Gymnasium's float32 cast) and the length of each episode [B].
    """
    length, num_envs = actions.shape
    start, obs = np.zeros((num_envs, 4)), np.zeros((length, num_envs, 4))
    lengths = np.zeros(num_envs, int)
    for i in range(num_envs):
        gym_env = gym.make("CartPole-v1").unwrapped
        gym_env.reset(seed=i)
        start[i] = gym_env.state
        for t in range(length):
            _, reward, terminated, *_ = gym_env.step(int(actions[t, i]))
            assert reward == 1.0
            obs[t, i], lengths[i] = gym_env.state, t + 1
            if terminated:
                break
    return start, obs, lengths


@functools.cache
def _episodes():
    actions = np.random.default_rng(1).integers(0, 2, (ENV.max_length, 16))
    return actions, *_gym_episodes(actions)


def _check_episodes(time_step, obs, lengths, atol):
    terminated = np.asarray(time_step.terminated)
    np.testing.assert_array_equal(terminated.argmax(axis=0) + 1, lengths)
    assert terminated.any(axis=0).all()
    for i, length in enumerate(lengths):
        np.testing.assert_allclose(time_step.obs[:length, i], obs[:length, i], rtol=0, atol=atol)
    np.testing.assert_array_equal(time_step.reward, 1.0)
    assert not time_step.truncated.any()


def test_whole_episodes_match_gymnasium_in_float64():
    actions, start, obs, lengths = _episodes()
    with jax.enable_x64(True):
        state = cartpole.state_from_gym(start, jnp.float64)
        time_step = jax.device_get(_rollout(state, jnp.asarray(actions)))
    assert time_step.obs.dtype == np.float64
    # Gymnasium's own float64 arithmetic: differences stay at rounding level (1e-15).
    _check_episodes(time_step, obs, lengths, atol=1e-9)


def test_whole_episodes_match_gymnasium_in_float32():
    actions, start, obs, lengths = _episodes()
    time_step = jax.device_get(_rollout(cartpole.state_from_gym(start), jnp.asarray(actions)))
    # float32 rounds at about 1e-7 relative per step against Gymnasium's float64, and a
    # falling pole amplifies differences by about e^(4 * 0.02) = 1.08 per step, so over
    # these episodes (at most 35 steps under random actions) differences stay near 1e-6
    # (observed 1.1e-6). 1e-4 leaves margin; a wrong dynamic would be off by order 1.
    # Episode lengths must match exactly.
    _check_episodes(time_step, obs, lengths, atol=1e-4)
    assert lengths.max() < 100


def test_reset_samples_each_variable_uniformly_within_gymnasium_bounds():
    state, obs = jax.jit(jax_env.reset_batch, static_argnums=(0, 2))(ENV, jax.random.key(0), 20_000)
    obs = np.asarray(obs)
    assert obs.shape == (20_000, 4) and obs.dtype == np.float32
    assert obs.min() >= -0.05 and obs.max() <= 0.05
    assert (obs.min(axis=0) < -0.0499).all() and (obs.max(axis=0) > 0.0499).all()
    np.testing.assert_allclose(obs.std(axis=0), 0.05 / np.sqrt(3), rtol=0.02)
    np.testing.assert_array_equal(obs[:, 2], state.theta)


def test_description_matches_gymnasium_spaces():
    gym_env = gym.make("CartPole-v1")
    assert isinstance(ENV, jax_env.Env)
    assert ENV.env_spec == spaces.env_spec(gym_env.observation_space, gym_env.action_space)
    assert ENV.max_length == gym_env.spec.max_episode_steps == 500


def test_make_adds_the_registered_time_limit():
    env = make("CartPole-v1")
    assert isinstance(env, jax_env.TimeLimit) and env.env == ENV and env.max_length == 500


def test_step_rejects_a_batched_action():
    state, _ = ENV.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        ENV.step(state, jnp.zeros((1,), jnp.int32))

import functools

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.envs import spaces
from batchrl.envs.jax import jax_env
from batchrl.envs.jax.classic import make, pendulum

ENV = pendulum.Pendulum()


_step_many = jax.jit(jax.vmap(ENV.step))
_rollout = jax.jit(lambda state, actions: jax_env.rollout_batch(ENV, state, actions)[1])


def _gym_step(gym_env, gym_state, action):
    gym_env.state = np.asarray(gym_state, np.float64)
    obs, reward, terminated, truncated, _ = gym_env.step(action)
    return obs, reward, terminated, truncated


def test_one_step_matches_gymnasium_over_sampled_states_and_actions():
    rng = np.random.default_rng(0)
    count = 500
    # Unwrapped angles over several turns (Gymnasium's theta is unbounded), the full
    # speed range, and torques beyond [-2, 2] to test the clipping inside step.
    states = np.stack(
        [rng.uniform(-4 * np.pi, 4 * np.pi, count), rng.uniform(-8, 8, count)], axis=1
    ).astype(np.float32)
    actions = rng.uniform(-4, 4, (count, 1)).astype(np.float32)
    assert (np.abs(actions) > 2).mean() > 0.4

    gym_env = gym.make("Pendulum-v1").unwrapped
    expected = [_gym_step(gym_env, s, a) for s, a in zip(states, actions, strict=True)]
    obs, reward, terminated, truncated = (np.array(x) for x in zip(*expected, strict=True))

    _, time_step = _step_many(pendulum.state_from_gym(states), jnp.asarray(actions))
    np.testing.assert_allclose(time_step.obs, obs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(time_step.reward, reward, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(time_step.terminated, terminated)
    np.testing.assert_array_equal(time_step.truncated, truncated)
    assert time_step.obs.dtype == jnp.float32 and time_step.reward.dtype == jnp.float32


def _gym_episodes(actions):
    """Gymnasium episodes from reset(seed=i) under actions [T, B, 1].

    Returns the start states [B, 2], and the float64 obs [T, B, 3] (from the state, before
    Gymnasium's float32 cast) and rewards [T, B].
    """
    length, num_envs, _ = actions.shape
    start = np.zeros((num_envs, 2))
    obs, reward = np.zeros((length, num_envs, 3)), np.zeros((length, num_envs))
    for i in range(num_envs):
        gym_env = gym.make("Pendulum-v1").unwrapped
        gym_env.reset(seed=i)
        start[i] = gym_env.state
        for t in range(length):
            _, reward[t, i], *_ = gym_env.step(actions[t, i])
            theta, theta_dot = gym_env.state
            obs[t, i] = np.cos(theta), np.sin(theta), theta_dot
    return start, obs, reward


@functools.cache
def _episodes():
    actions = np.random.default_rng(1).uniform(-2.5, 2.5, (ENV.max_length, 16, 1))
    actions = actions.astype(np.float32)
    return actions, *_gym_episodes(actions)


def test_whole_episodes_match_gymnasium_in_float64():
    actions, start, obs, reward = _episodes()
    with jax.enable_x64(True):
        state = pendulum.state_from_gym(start, jnp.float64)
        time_step = jax.device_get(_rollout(state, jnp.asarray(actions)))
    assert time_step.obs.dtype == np.float64
    # Same arithmetic as Gymnasium's float64: differences start at rounding (1e-16) and are
    # amplified only while a pendulum passes near its unstable upright position; the worst
    # of these episodes reaches about 1e-8 in 200 steps.
    np.testing.assert_allclose(time_step.obs, obs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(time_step.reward, reward, rtol=0, atol=1e-6)
    assert not time_step.terminated.any() and not time_step.truncated.any()


def test_whole_episodes_match_gymnasium_in_float32_as_far_as_float32_allows():
    actions, start, obs, reward = _episodes()
    time_step = _rollout(pendulum.state_from_gym(start), jnp.asarray(actions))
    error = np.maximum(
        np.abs(time_step.obs - obs).max(axis=2), np.abs(time_step.reward - reward) / 16
    )  # [T, B], rewards scaled by their range
    # float32 rounds at about 1e-7 relative per step, against Gymnasium's float64. Near the
    # upright position the dynamics amplify any difference by e^(sqrt(15) * 0.05) = 1.2 per
    # step, so no fixed tolerance holds over a whole 200-step episode: a pendulum that
    # nearly balances can fall to the other side in one precision and not the other. What
    # float32 allows: the first 50 steps (2.5 s) of every episode within 1e-3 (observed
    # 7e-5 at most), and the median episode within 1e-3 over all 200 steps (observed 2e-5;
    # the worst two episodes here reach 5e-3 and 2e-2). An error in the dynamics would
    # break both by order 1.
    assert error[:50].max() < 1e-3
    assert np.median(error.max(axis=0)) < 1e-3


def test_reset_samples_angle_and_speed_uniformly_within_gymnasium_bounds():
    state, obs = jax.jit(jax_env.reset_batch, static_argnums=(0, 2))(ENV, jax.random.key(0), 20_000)
    theta, theta_dot = np.asarray(state.theta), np.asarray(state.theta_dot)
    assert obs.shape == (20_000, 3) and obs.dtype == jnp.float32
    assert np.abs(theta).max() <= np.float32(np.pi)  # pi rounded to float32, as stored.
    assert theta.min() < -np.pi + 0.01 and theta.max() > np.pi - 0.01
    assert theta_dot.min() >= -1 and theta_dot.max() <= 1
    assert theta_dot.min() < -0.99 and theta_dot.max() > 0.99
    # Uniform: standard deviation high / sqrt(3).
    np.testing.assert_allclose(theta.std(), np.pi / np.sqrt(3), rtol=0.02)
    np.testing.assert_allclose(theta_dot.std(), 1 / np.sqrt(3), rtol=0.02)
    np.testing.assert_allclose(
        obs, np.stack([np.cos(theta), np.sin(theta), theta_dot], 1), atol=1e-6
    )


def test_description_matches_gymnasium_spaces():
    gym_env = gym.make("Pendulum-v1")
    assert isinstance(ENV, jax_env.Env)
    assert ENV.env_spec == spaces.env_spec(gym_env.observation_space, gym_env.action_space)
    assert ENV.max_length == gym_env.spec.max_episode_steps == 200


def test_make_adds_the_registered_time_limit():
    env = make("Pendulum-v1")
    assert isinstance(env, jax_env.TimeLimit) and env.env == ENV and env.max_length == 200


def test_make_names_an_unknown_env_and_the_known_ones():
    with pytest.raises(ValueError, match=r"'Pendulum-v0'.*CartPole-v1, Pendulum-v1"):
        make("Pendulum-v0")


def test_step_rejects_a_misshapen_action():
    state, _ = ENV.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"shape \(\)"):
        ENV.step(state, jnp.zeros(()))

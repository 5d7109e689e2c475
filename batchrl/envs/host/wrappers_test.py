import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs.host import mock, spec, wrappers


class _ArrayEnv(gym.Env):
    """Observation [step, step + 0.5] of a chosen dtype; reward 0.25 per step."""

    def __init__(self, dtype=np.float64, action_space=None):
        self.observation_space = gym.spaces.Box(-10, 10, (2,), dtype)
        self.action_space = action_space or gym.spaces.Discrete(2)
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        return self._obs(), 0.25, False, False, {}

    def _obs(self):
        return np.array([self.steps, self.steps + 0.5]).astype(self.observation_space.dtype)


def _pendulum():
    return gym.make("Pendulum-v1")


def test_range_normalize_maps_pendulum_obs_into_unit_range():
    raw, env = _pendulum(), wrappers.RangeNormalize(_pendulum())
    low, high = raw.observation_space.low, raw.observation_space.high
    raw_obs, _ = raw.reset(seed=3)
    obs, _ = env.reset(seed=3)
    np.testing.assert_allclose(obs, 2 * (raw_obs - low) / (high - low) - 1, rtol=1e-6)
    for _ in range(20):
        obs, *_ = env.step(env.action_space.sample())
        assert np.all(obs >= -1) and np.all(obs <= 1)
    assert env.observation_space == gym.spaces.Box(-1, 1, (3,), np.float32)
    assert env.action_space == gym.spaces.Box(-1, 1, (1,), np.float32)


@pytest.mark.parametrize(("action", "bound"), [(1.0, "high"), (-1.0, "low")])
def test_range_normalize_maps_action_bounds_to_env_bounds(action, bound):
    raw = _pendulum()
    env = wrappers.RangeNormalize(_pendulum(), observations=False)
    raw.reset(seed=0)
    env.reset(seed=0)
    env_action = getattr(raw.action_space, bound)
    assert abs(env_action[0]) == 2.0
    raw_obs, raw_reward, *_ = raw.step(env_action)
    obs, reward, *_ = env.step(np.array([action], np.float32))
    np.testing.assert_allclose(obs, raw_obs)
    assert reward == pytest.approx(raw_reward)


def test_range_normalize_leaves_discrete_actions_alone():
    env = wrappers.RangeNormalize(gym.make("CartPole-v1"), observations=False)
    assert env.action_space == gym.spaces.Discrete(2)


def test_range_normalize_rejects_infinite_observation_range():
    with pytest.raises(ValueError, match="observation space") as error:
        wrappers.RangeNormalize(gym.make("CartPole-v1"), actions=False)
    assert "CartPole-v1" in str(error.value)
    assert "observations=False" in str(error.value)


def test_range_normalize_rejects_infinite_action_range():
    env = mock.CountingEnv()
    env.action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ValueError, match=r"action space.*actions=False"):
        wrappers.RangeNormalize(env, observations=False)


def test_unsupported_action_space_error_names_space():
    env = mock.CountingEnv()
    env.action_space = gym.spaces.Dict({"move": gym.spaces.Discrete(2)})
    with pytest.raises(spec.UnsupportedSpaceError, match="action space Dict"):
        wrappers.RangeNormalize(env, observations=False)


def test_unsupported_observation_space_error_names_space():
    env = gym.make("Blackjack-v1")
    with pytest.raises(spec.UnsupportedSpaceError, match=r"observation space Tuple.*Blackjack-v1"):
        wrappers.RangeNormalize(env)
    with pytest.raises(spec.UnsupportedSpaceError, match="observation space Tuple"):
        wrappers.FrameHistory(env, [0, 1], flatten=False)


def test_clip_action_clips_to_action_bounds():
    env = wrappers.ClipAction(mock.CountingEnv(duration=5))
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array([5.0, 0.5], np.float32))
    assert reward == pytest.approx(1.0 + 0.5 + 1)  # Clipped action sum plus step 1.
    _, reward, *_ = env.step(np.array([-3.0, -4.0], np.float32))
    assert reward == pytest.approx(-2.0 + 2)


def test_limit_duration_truncates_at_exactly_duration():
    env = wrappers.LimitDuration(mock.CountingEnv(duration=100), 10)
    assert isinstance(env, gym.wrappers.TimeLimit)
    env.reset(seed=0)
    for step in range(1, 11):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs[0] == step
        assert not terminated
        assert truncated == (step == 10)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(np.float64, np.float32), (np.float32, np.float32), (np.int32, np.int32)],
)
def test_convert_to_32bit_dtypes(dtype, expected):
    env = wrappers.ConvertTo32Bit(_ArrayEnv(dtype))
    assert env.observation_space.dtype == expected
    obs, _ = env.reset(seed=0)
    assert obs.dtype == expected
    obs, reward, *_ = env.step(0)
    assert obs.dtype == expected
    np.testing.assert_array_equal(obs, np.array([1, 1.5]).astype(dtype))
    assert type(reward) is np.float32
    assert reward == 0.25


def test_convert_to_32bit_reward_of_real_env():
    env = wrappers.ConvertTo32Bit(_pendulum())
    env.reset(seed=0)
    _, reward, *_ = env.step(np.zeros(1, np.float32))
    assert type(reward) is np.float32


def _expected_history(history, past_indices, flatten):
    frames = [history[max(len(history) - 1 - index, 0)] for index in past_indices]
    return np.concatenate(frames) if flatten else np.stack(frames)


@pytest.mark.parametrize("flatten", [False, True])
def test_frame_history_matches_manual_stacking(flatten):
    past_indices = [0, 1, 3]
    env = wrappers.FrameHistory(mock.CountingEnv(duration=6), past_indices, flatten)
    raw = mock.CountingEnv(duration=6)
    shape = (9,) if flatten else (3, 3)
    assert env.observation_space.shape == shape
    for seed in (0, 1):  # The second episode must not see the first one's frames.
        obs, _ = env.reset(seed=seed)
        history = [raw.reset(seed=seed)[0]]
        assert obs.shape == shape
        np.testing.assert_array_equal(obs, _expected_history(history, past_indices, flatten))
        for _ in range(6):
            action = np.zeros(2, np.float32)
            obs, *_ = env.step(action)
            history.append(raw.step(action)[0])
            np.testing.assert_array_equal(obs, _expected_history(history, past_indices, flatten))


def test_frame_history_pads_with_first_obs_at_reset():
    env = wrappers.FrameHistory(mock.CountingEnv(duration=5), [0, 2], flatten=False)
    first, _ = env.reset(seed=0)
    np.testing.assert_array_equal(first[1], first[0])
    obs, *_ = env.step(np.zeros(2, np.float32))
    assert obs[0][0] == 1
    np.testing.assert_array_equal(obs[1], first[0])


@pytest.mark.parametrize("flatten", [False, True])
def test_frame_history_space_bounds(flatten):
    raw_space = _pendulum().observation_space
    space = wrappers.FrameHistory(_pendulum(), [0, 1], flatten).observation_space
    combine = np.concatenate if flatten else np.stack
    np.testing.assert_array_equal(space.low, combine([raw_space.low] * 2))
    np.testing.assert_array_equal(space.high, combine([raw_space.high] * 2))


def test_frame_delta_values_and_bounds():
    env = wrappers.FrameDelta(_pendulum())
    raw = _pendulum()
    low, high = raw.observation_space.low, raw.observation_space.high
    np.testing.assert_array_equal(env.observation_space.low, low - high)
    np.testing.assert_array_equal(env.observation_space.high, high - low)
    obs, _ = env.reset(seed=5)
    previous, _ = raw.reset(seed=5)
    np.testing.assert_array_equal(obs, np.zeros(3, np.float32))
    for _ in range(5):
        action = np.array([1.5], np.float32)
        obs, *_ = env.step(action)
        current, *_ = raw.step(action)
        np.testing.assert_allclose(obs, current - previous, atol=1e-6)
        assert np.any(obs != 0)
        previous = current


def test_frame_delta_on_counting_env():
    env = wrappers.FrameDelta(mock.CountingEnv(duration=4))
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [0, 0, 0])
    obs, *_ = env.step(np.zeros(2, np.float32))
    np.testing.assert_array_equal(obs, [1, 0, 0])


def test_action_repeat_sums_rewards_and_stops_at_episode_end():
    inner = mock.CountingEnv(duration=3)
    env = wrappers.ActionRepeat(inner, 2)
    env.reset(seed=0)
    action = np.zeros(2, np.float32)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (2, 1 + 2, False, False)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (3, 3, True, False)
    assert inner.steps == 3


def test_action_repeat_rejects_zero_amount():
    with pytest.raises(ValueError, match="at least 1"):
        wrappers.ActionRepeat(mock.CountingEnv(), 0)


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_autoreset_same_step(end):
    env = wrappers.AutoReset(mock.CountingEnv(duration=2, end=end), "same_step")
    action = np.zeros(2, np.float32)
    first, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (1, 1, False, False)
    assert "final_obs" not in info
    obs, reward, terminated, truncated, info = env.step(action)
    assert reward == 2
    assert (terminated, truncated) == (end == "terminated", end == "truncated")
    assert obs[0] == 0  # First obs of the new episode.
    assert obs[2] != first[2]  # A new episode draws a new offset.
    np.testing.assert_array_equal(info["final_obs"], [2, 2, first[2]])
    assert info["final_info"] == {}
    assert info["seed"] is None  # The reset's info.
    obs, reward, terminated, truncated, info = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (1, 1, False, False)


def test_autoreset_next_step():
    env = wrappers.AutoReset(mock.CountingEnv(duration=2), "next_step")
    assert isinstance(env, gym.wrappers.Autoreset)
    action = np.zeros(2, np.float32)
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (1, 1, False, False)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (2, 2, True, False)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (0, 0, False, False)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (1, 1, False, False)


def test_autoreset_unknown_mode():
    with pytest.raises(ValueError, match=r"'sometimes'.*same_step.*next_step"):
        wrappers.AutoReset(mock.CountingEnv(), "sometimes")


def test_apply_order():
    env = wrappers.apply(
        mock.CountingEnv(duration=100),
        normalize=False,
        clip_actions=True,
        duration=10,
        to_32bit=True,
        action_repeat=2,
        autoreset="same_step",
    )
    layers = []
    while isinstance(env, gym.Wrapper):
        layers.append(type(env))
        env = env.env
    assert layers == [
        wrappers.SameStepAutoReset,
        wrappers.ConvertTo32Bit,
        gym.wrappers.ClipAction,
        wrappers.ActionRepeat,
        gym.wrappers.TimeLimit,
    ]


def test_apply_clips_before_mapping_to_env_range():
    raw = _pendulum()
    env = wrappers.apply(_pendulum(), normalize=True, clip_actions=True, to_32bit=True)
    raw.reset(seed=1)
    env.reset(seed=1)
    raw_obs, raw_reward, *_ = raw.step(np.array([2.0], np.float32))
    obs, reward, *_ = env.step(np.array([7.0], np.float32))
    low, high = raw.observation_space.low, raw.observation_space.high
    np.testing.assert_allclose(obs, 2 * (raw_obs - low) / (high - low) - 1, rtol=1e-6)
    assert type(reward) is np.float32
    assert reward == pytest.approx(raw_reward, rel=1e-6)


def test_apply_duration_counts_env_steps_before_repeat():
    env = wrappers.apply(mock.CountingEnv(duration=100), duration=3, action_repeat=2)
    env.reset(seed=0)
    action = np.zeros(2, np.float32)
    assert env.step(action)[3] is False
    obs, _, terminated, truncated, _ = env.step(action)
    assert (obs[0], terminated, truncated) == (3, False, True)


def test_apply_defaults_leave_env_unwrapped():
    env = mock.CountingEnv()
    assert wrappers.apply(env) is env

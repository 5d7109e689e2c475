import pickle

import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs import BatchEnv
from batchrl.envs.host import make


def test_limit_is_the_smaller_of_the_registered_one_and_max_length():
    assert make.Make("Pendulum-v1")().spec.max_episode_steps == 200
    assert make.Make("Pendulum-v1", max_length=50)().spec.max_episode_steps == 50
    assert make.Make("Reacher-v5", max_length=1000)().spec.max_episode_steps == 50


def test_entry_point_builds_the_class_with_a_time_limit():
    env = pickle.loads(pickle.dumps(make.Make("batchrl.envs.host.mock:CountingEnv", 7)))()
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 7


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Nope-v0", "unknown env 'Nope-v0'"),
        ("no_such_module:X", "cannot import 'no_such_module'"),
        ("batchrl.envs.host.mock:Nope", "module 'batchrl.envs.host.mock' has no 'Nope'"),
    ],
)
def test_bad_names_are_one_line_errors_before_any_worker_starts(name, message):
    with pytest.raises(ValueError, match=message):
        make.check_name(name)


def test_batch_of_an_unknown_id_fails_before_starting_workers():
    with pytest.raises(ValueError, match="unknown env 'Nope-v0'"):
        BatchEnv.external("Nope-v0", 2)


def test_training_envs_repeat_actions_as_the_config_asks():
    single = make.Make("Pendulum-v1", 7)()
    repeated = pickle.loads(pickle.dumps(make.Make("Pendulum-v1", 7, action_repeat=3)))()
    single.reset(seed=0)
    repeated.reset(seed=0)
    action = np.ones(single.action_space.shape, np.float32)
    rewards = [single.step(action)[1] for _ in range(7)]
    first, second, third = (repeated.step(action) for _ in range(3))
    assert first[1] == pytest.approx(sum(rewards[:3]))
    assert second[1] == pytest.approx(sum(rewards[3:6]))
    # The time limit counts the env's own steps: the third action ends after one.
    assert third[1] == pytest.approx(rewards[6]) and third[3]
    with pytest.raises(ValueError, match="action_repeat must be at least 1, got 0"):
        make.Make("Pendulum-v1", action_repeat=0)

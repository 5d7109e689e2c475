import pickle

import gymnasium as gym
import pytest

from batchrl.envs import BatchEnv, make


def test_limit_is_the_smaller_of_the_registered_one_and_max_length():
    assert make.Make("Pendulum-v1")().spec.max_episode_steps == 200
    assert make.Make("Pendulum-v1", max_length=50)().spec.max_episode_steps == 50
    assert make.Make("Reacher-v5", max_length=1000)().spec.max_episode_steps == 50


def test_entry_point_builds_the_class_with_a_time_limit():
    env = pickle.loads(pickle.dumps(make.Make("batchrl.envs.mock:CountingEnv", 7)))()
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 7


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Nope-v0", "unknown env 'Nope-v0'"),
        ("no_such_module:X", "cannot import 'no_such_module'"),
        ("batchrl.envs.mock:Nope", "module 'batchrl.envs.mock' has no 'Nope'"),
    ],
)
def test_bad_names_are_one_line_errors_before_any_worker_starts(name, message):
    with pytest.raises(ValueError, match=message):
        make.check_name(name)


def test_batch_of_an_unknown_id_fails_before_starting_workers():
    with pytest.raises(ValueError, match="unknown env 'Nope-v0'"):
        BatchEnv.external("Nope-v0", 2)

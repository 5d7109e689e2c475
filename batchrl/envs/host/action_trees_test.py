"""Actions of every space Gymnasium's vector envs batch: MultiBinary, Tuple and Dict trees.

Each env observes the action it was given, so equal results with `SyncVectorEnv` mean
every leaf of every env's action arrived as Gymnasium hands it over.
"""

import contextlib
import functools

import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs import BatchEnv, UnsupportedSpaceError, spaces
from batchrl.testing import mock

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete
ACTION_SPACES = {
    "multi_binary": gym.spaces.MultiBinary(5),
    "tuple": gym.spaces.Tuple((Discrete(3), gym.spaces.MultiBinary(2))),
    "dict": gym.spaces.Dict(
        {"move": Discrete(4, start=-1), "force": Box(-1.0, 1.0, (2,), np.float32)}
    ),
    "nested": gym.spaces.Dict(
        {
            "arm": gym.spaces.Tuple((Box(0.0, 2.0, (3,)), gym.spaces.MultiDiscrete([2, 5]))),
            "grip": gym.spaces.MultiBinary((2, 2)),
        }
    ),
}


@pytest.mark.parametrize("name", list(ACTION_SPACES))
@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_action_trees_step_as_sync_vector_env_steps_them(name, build):
    space = ACTION_SPACES[name]
    make = functools.partial(mock.ActionEcho, space)
    n = 3
    if build == "external":
        ours = BatchEnv.external([make] * n, envs_per_worker=2)
    else:
        ours = BatchEnv.from_envs([make() for _ in range(n)])
    theirs = gym.vector.SyncVectorEnv([make] * n)
    with ours, contextlib.closing(theirs):
        assert ours.action_space == theirs.action_space
        ours.reset(seed=0), theirs.reset(seed=0)
        theirs.action_space.seed(1)
        for t in range(6):
            actions = theirs.action_space.sample()
            got, want = ours.step(actions), theirs.step(actions)
            for a, b, what in zip(
                got[:4], want[:4], ("obs", "reward", "ended", "cut"), strict=True
            ):
                np.testing.assert_array_equal(a, b, err_msg=f"{what} at step {t}")


# SyncVectorEnv's envs get the lists themselves, which Gymnasium's `Box.contains` warns of.
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_leaves_given_as_lists_step_as_sync_vector_env_steps_them(build):
    # A leaf's values as a list were read as a node of the tree, and the step failed.
    space = ACTION_SPACES["nested"]
    make = functools.partial(mock.ActionEcho, space)
    if build == "external":
        ours = BatchEnv.external([make] * 2)
    else:
        ours = BatchEnv.from_envs([make() for _ in range(2)])
    theirs = gym.vector.SyncVectorEnv([make] * 2)
    with ours, contextlib.closing(theirs):
        ours.reset(seed=0), theirs.reset(seed=0)
        arm = ([[0.5, 1.0, 1.5], [0.0, 2.0, 1.0]], [[1, 4], [0, 2]])
        actions = {"arm": arm, "grip": [[[1, 0], [0, 1]], [[0, 0], [1, 1]]]}
        got, want = ours.step(actions), theirs.step(actions)
        for a, b in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(a, b)


def test_an_action_tree_that_does_not_fit_names_the_leaf():
    space = ACTION_SPACES["dict"]
    with BatchEnv.from_envs([mock.ActionEcho(space) for _ in range(2)]) as batch:
        batch.reset(seed=0)
        with pytest.raises(ValueError, match=r'^actions\["force"\] has shape \(2,\), but'):
            batch.step({"move": np.zeros(2, np.int64), "force": np.zeros(2)})
        with pytest.raises(ValueError, match=r"^actions must be a dict of 2 entries"):
            batch.step(np.zeros((2, 3)))
        with pytest.raises(ValueError) as error:
            batch.step({"move": np.zeros(2, np.int64)})
        said = "actions lacks key 'force': this batch's action space has keys ['force', 'move']"
        assert str(error.value) == said


def test_a_key_the_action_space_lacks_is_not_read_as_sync_vector_env_reads_none():
    space = ACTION_SPACES["dict"]
    make = functools.partial(mock.ActionEcho, space)
    ours = BatchEnv.external([make] * 2)
    theirs = gym.vector.SyncVectorEnv([make] * 2)
    with ours, contextlib.closing(theirs):
        ours.reset(seed=0), theirs.reset(seed=0)
        actions = {"move": np.array([2, -1]), "force": np.ones((2, 2), np.float32)}
        actions["log_prob"] = np.zeros(2)  # Beside the action, as a policy may return it.
        got, want = ours.step(actions), theirs.step(actions)
        for a, b in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(a, b)


def test_an_action_leaf_no_batch_steps_is_refused_in_one_line():
    text = gym.spaces.Text(4)
    with pytest.raises(UnsupportedSpaceError, match=r"^unsupported action space Text"):
        spaces.check_action_space(gym.spaces.Dict({"say": text}), "'Talker'")


def test_floats_for_a_discrete_leaf_are_refused_naming_the_leaf():
    space = ACTION_SPACES["dict"]
    with BatchEnv.from_envs([mock.ActionEcho(space) for _ in range(2)]) as batch:
        batch.reset(seed=0)
        force = np.zeros((2, 2), np.float32)
        with pytest.raises(TypeError, match=r'^actions\["move"\] of dtype float64 do not fit'):
            batch.step({"move": np.array([0.9, 2.0]), "force": force})
        # Floats as a list for a float leaf: cast to the space's, as `Box.contains` casts them.
        batch.step({"move": np.array([0, 2]), "force": force.astype(np.float64).tolist()})

"""`observation_mode`, as AsyncVectorEnv takes it: envs whose observation bounds differ."""

import functools
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import batch_differing_spaces

from batchrl.envs import BatchEnv
from batchrl.envs.host.errors import SpaceMismatchError
from batchrl.testing import mock

BOUNDED = [Box(0.0, float(i), (5,), np.float32) for i in range(1, 4)]  # Bounds 1, 2, 3.
BUILDERS = {
    "local": lambda fns, **kw: BatchEnv.from_envs([make() for make in fns], **kw),
    "workers": lambda fns, **kw: BatchEnv.external(fns, envs_per_worker=1, **kw),
    "one worker": lambda fns, **kw: BatchEnv.external(fns, envs_per_worker=len(fns), **kw),
}


def makers(observation_spaces):
    return [functools.partial(mock.SpaceEnv, space) for space in observation_spaces]


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_different_bounds_batch_and_step_as_sync_vector_env_does(build):
    fns = makers(BOUNDED)
    with build(fns, observation_mode="different") as ours:
        theirs = SyncVectorEnv(fns, observation_mode="different")
        assert ours.observation_space == batch_differing_spaces(BOUNDED)
        assert ours.observation_space == theirs.observation_space
        assert ours.single_observation_space == BOUNDED[0]
        np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
        action = ours.action_space.sample()
        for got, want in zip(ours.step(action)[:4], theirs.step(action)[:4], strict=True):
            np.testing.assert_array_equal(got, want)
        # Env 2 draws from its own bounds, up to 3, in the batch's one array.
        assert ours.observation_space.contains(ours.step(action)[0])
        theirs.close()


class Largest(gym.Env):
    """Observes the largest value its own space holds: Discrete(n, start) in a Dict."""

    action_space = Discrete(2)

    def __init__(self, n: int, start: int = 0):
        self.observation_space = Dict({"count": Discrete(n, start=start)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        space = self.observation_space["count"]
        return {"count": space.start + space.n - 1}, {}

    def step(self, action):
        return self.reset()[0], 0.0, False, False, {}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_different_counts_are_each_checked_by_the_envs_own_space(build):
    # Envs sharing a worker (or this process) were checked by the first env's Discrete(2):
    # env 1's 2 was "outside its observation_space", where SyncVectorEnv batched it.
    fns = [functools.partial(Largest, n, start) for n, start in ((2, 0), (3, 0), (4, -2))]
    with build(fns, observation_mode="different") as ours:
        theirs = SyncVectorEnv(fns, observation_mode="different")
        assert ours.observation_space == theirs.observation_space
        got, want = ours.reset(seed=0)[0]["count"], theirs.reset(seed=0)[0]["count"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, [1, 2, 1])
        np.testing.assert_array_equal(ours.step(np.zeros(3, np.int64))[0]["count"], want)


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_different_bounds_are_refused_in_one_line_when_spaces_must_be_the_same(build):
    message = (
        r"the sub-environments observation spaces are not equivalent\. If this is "
        r"intentional, use `observation_mode='different'` instead\.$"
    )
    with pytest.raises(SpaceMismatchError, match=message) as error:
        build(makers(BOUNDED))
    # A ValueError as batchrl refuses bad input, a RuntimeError as AsyncVectorEnv raises.
    assert isinstance(error.value, ValueError) and isinstance(error.value, RuntimeError)
    assert "\n" not in str(error.value) and "Box(0.0, 1.0" in str(error.value)


def test_given_spaces_are_the_batchs_and_an_envs():
    high = np.repeat(np.arange(1.0, 4.0, dtype=np.float32), 5).reshape(3, 5)
    batched = Box(0.0, high, (3, 5), np.float32)
    single = Box(0.0, 1.0, (5,), np.float32)
    with BatchEnv.external(makers(BOUNDED), observation_mode=(batched, single)) as env:
        assert (env.observation_space, env.single_observation_space) == (batched, single)
        env.reset(seed=0)
        env.step(env.action_space.sample())
    with pytest.raises(SpaceMismatchError, match=r"single observation space of observation_mode"):
        BatchEnv.from_envs(
            [make() for make in makers(BOUNDED)], observation_mode=(batched, Box(0, 1, (4,)))
        )


@pytest.mark.parametrize("mode", ["same", "different"])
def test_shapes_or_kinds_that_differ_are_refused_in_every_mode(mode):
    shapes = [Box(0.0, 1.0, (i + 1,), np.float32) for i in range(3)]
    with pytest.raises(RuntimeError, match=r"^envs in one batch must share"):
        BatchEnv.external(makers(shapes), envs_per_worker=1, observation_mode=mode)
    kinds = [Box(0.0, 1.0, (3,)), Discrete(5), Dict({"a": Discrete(2)})]
    with pytest.raises(RuntimeError, match=r"^envs in one batch must share"):
        BatchEnv.from_envs([make() for make in makers(kinds)], observation_mode=mode)


def test_an_unknown_mode_is_refused_before_any_worker_starts():
    message = re.escape(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
        "batch observation space, actual got invalid"
    )
    with pytest.raises(ValueError, match=message):
        BatchEnv.external(makers(BOUNDED), observation_mode="invalid")
    with pytest.raises(TypeError, match="Expected both elements of observation_mode to be"):
        BatchEnv.from_envs([gym.make("CartPole-v1")], observation_mode=(BOUNDED[0], "Box"))

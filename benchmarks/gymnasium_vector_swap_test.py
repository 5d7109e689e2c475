"""The swap that runs Gymnasium's vector tests builds a BatchEnv that steps as AsyncVectorEnv."""

import contextlib
import importlib.util
import pathlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv

_PATH = pathlib.Path(__file__).with_name("gymnasium_vector_swap.py")
_SPEC = importlib.util.spec_from_file_location("gymnasium_vector_swap", _PATH)
swap = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(swap)  # Defines the class; the swap happens only in pytest_configure.


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=[m.name for m in AutoresetMode])
def test_it_takes_async_vector_envs_arguments_and_steps_as_it_does(mode):
    fns = [lambda: gym.make("CartPole-v1")] * 3
    ours = swap.BatchEnvInAsyncsPlace(fns, shared_memory=False, copy=True, autoreset_mode=mode)
    # Its workers from a fork server: a plain fork of this process, whose JAX runs
    # threads, could deadlock (Python warns of it).
    theirs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="forkserver")
    assert gym.vector.AsyncVectorEnv is not swap.BatchEnvInAsyncsPlace  # Not swapped here.
    with ours, contextlib.closing(theirs):
        assert isinstance(ours, BatchEnv) and len(ours.groups) == 3
        assert data_equivalence(ours.reset(seed=7), theirs.reset(seed=7))
        actions = np.random.default_rng(0).integers(0, 2, (40, 3))
        for t, action in enumerate(actions):
            got, want = ours.step(action), theirs.step(action)
            assert data_equivalence(got, want), f"step {t}"
            if mode is AutoresetMode.DISABLED and (want[2] | want[3]).any():
                assert data_equivalence(ours.reset(seed=t), theirs.reset(seed=t))


def test_max_concurrency_is_how_many_worker_processes_step_the_envs():
    fns = [lambda: gym.make("CartPole-v1")] * 5
    with swap.BatchEnvInAsyncsPlace(fns, max_concurrency=2) as env:
        assert [group.num_envs for group in env.groups] == [3, 2]
        env.reset(seed=0)
        assert env.step(np.zeros(5, np.int64))[0].shape == (5, 4)
    with pytest.raises(
        ValueError, match=r"^max_concurrency must be a whole number of at least 1 or None, got 0$"
    ):
        swap.BatchEnvInAsyncsPlace(fns, max_concurrency=0)

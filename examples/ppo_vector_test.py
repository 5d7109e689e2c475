"""The vector-API PPO example runs unchanged on BatchEnv and learns exactly as on SyncVectorEnv."""

import dataclasses

import jax
import numpy as np
import pytest
from ppo_vector import Args, train


@pytest.mark.slow
def test_the_same_loop_learns_the_same_on_batch_env_as_on_sync_vector_env():
    args = Args(env="Pendulum-v1", num_envs=4, total_steps=1024, num_steps=64, minibatches=4)
    sync = train(dataclasses.replace(args, vector="sync"))
    ours = train(dataclasses.replace(args, vector="batchrl"))
    assert len(sync["returns"]) == 4  # One 200-step episode per env, counted by the wrapper.
    assert ours["returns"] == sync["returns"]
    jax.tree.map(np.testing.assert_array_equal, ours["params"], sync["params"])


@pytest.mark.slow
def test_the_same_loop_learns_the_same_on_the_mujoco_batch_as_on_sync_vector_env():
    args = Args(env="Hopper-v5", num_envs=4, total_steps=1024, num_steps=64, minibatches=4)
    sync = train(dataclasses.replace(args, vector="sync"))
    ours = train(dataclasses.replace(args, vector="mujoco"))
    assert len(sync["returns"]) >= 4  # Hopper's random early episodes end within 1024 steps.
    assert ours["returns"] == sync["returns"]
    jax.tree.map(np.testing.assert_array_equal, ours["params"], sync["params"])


def test_an_unknown_vector_env_is_named():
    with pytest.raises(ValueError, match="unknown --vector 'ray': use sync, async, batchrl or mu"):
        train(Args(vector="ray"))


def test_a_discrete_env_and_a_budget_of_no_update_are_named():
    # ClipAction's bare AssertionError, and a run of no update that said nothing.
    with pytest.raises(ValueError, match=r"CartPole-v1's action space is Discrete\(2\): batchrl"):
        train(Args(vector="sync", env="CartPole-v1", num_envs=2, total_steps=512))
    with pytest.raises(ValueError, match=r"^--total-steps 100 trains no update: one takes"):
        train(Args(vector="sync", env="Pendulum-v1", num_envs=2, total_steps=100))


def test_minibatches_that_do_not_split_an_update_are_named():
    # A reshape of JAX's, deep in the update, was the error.
    with pytest.raises(ValueError, match=r"^--minibatches 3 does not split an update's num_steps"):
        train(Args(vector="sync", env="Pendulum-v1", num_envs=2, minibatches=3))

"""Every kind of group answers the Group calls as Gymnasium's envs would.

Ray's actors answer the same calls; batchrl/envs/ray/ray_group_test.py runs them on a
two-node cluster.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import infos, local, make, process
from batchrl.envs.mujoco import mujoco_group

ENV = "Hopper-v5"


def local_group():
    return local.LocalGroup([gym.make(ENV) for _ in range(2)])


def process_group():
    return process.ProcessGroup([make.Make(ENV)] * 2)


def mujoco_batch():
    return mujoco_group.MujocoGroup(ENV, 2)


@pytest.mark.parametrize("build", [local_group, process_group, mujoco_batch])
def test_a_group_resets_steps_and_answers_per_env(build):
    group = build()
    singles = [gym.make(ENV) for _ in range(2)]
    try:
        assert group.num_envs == 2 and group.restarts == 0
        assert group.observation_space == singles[0].observation_space
        group.reset_async([1, 0], [11, 10], None)
        obs, reset_infos = group.reset_wait()
        for position, env in zip((1, 0), (singles[1], singles[0]), strict=True):
            want_obs, want_info = env.reset(seed=10 + position)
            np.testing.assert_array_equal(obs[1 - position], want_obs)
            assert reset_infos[1 - position] == want_info
        np.testing.assert_array_equal(group.buffers.obs[0], singles[0].reset(seed=10)[0])
        singles[0].reset(seed=10)
        actions = np.stack([np.full(3, 0.3, np.float32), np.full(3, -0.3, np.float32)])
        for _ in range(3):
            group.step_async(actions, AutoresetMode.NEXT_STEP)
            obs, reward, terminated, truncated, chunk = group.step_wait()
            step_infos = infos.Infos([chunk], [2])
            for i, env in enumerate(singles):
                want = env.step(actions[i])
                np.testing.assert_array_equal(obs[i], want[0])
                assert (reward[i], terminated[i], truncated[i]) == want[1:4]
                assert step_infos[i]["x_velocity"] == want[4]["x_velocity"]
        assert group.attribute(1, "spec").id == ENV
        assert group.call(0, "frame_skip") == 4
    finally:
        group.close()
        for env in singles:
            env.close()

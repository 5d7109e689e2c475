import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs import spaces
from batchrl.training import policy_obs


@pytest.mark.parametrize(("high", "said"), [(10, "0 to 10"), (255, "0 to 255")])
def test_a_float_frame_is_refused_naming_its_boxs_bounds(high, said):
    # MiniGrid's cells (a uint8 Box of 0 to 10) were said to take 0 to 255, their dtype's.
    space = gym.spaces.Box(0, high, (7, 7, 3), np.uint8)
    leaf = spaces.observation_tree(space)
    with pytest.raises(
        ValueError, match=rf"^obs is float32: this leaf takes uint8 values, {said} "
    ):
        policy_obs.as_batch(leaf, np.zeros((7, 7, 3), np.float32))

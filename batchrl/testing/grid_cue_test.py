import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec
from batchrl.envs.jax import jax_env
from batchrl.ppo import config as config_lib
from batchrl.testing import cue, grid_cue, loop_runs


@pytest.mark.parametrize(("dtype", "bright"), [("float32", 1.0), ("uint8", 255)])
def test_channel_0_lights_the_cues_corner_and_the_action_naming_it_earns_1(dtype, bright):
    env = grid_cue.GridCue(dtype=dtype)
    leaf = env.env_spec.observation
    assert leaf == env_spec.ObsLeaf((6, 6, 2), dtype, env_spec.IMAGE, low=0.0, high=float(bright))
    state, obs = env.reset(jax.random.key(0))
    rewards = []
    for step in range(10):
        assert obs.dtype == jnp.dtype(dtype) and obs.shape == (6, 6, 2)
        lit = np.argwhere(np.asarray(obs[..., 0]) == bright)
        corner = int(state.cue)
        top, left = (corner // 2) * 4, (corner % 2) * 4
        np.testing.assert_array_equal(
            lit, [[top, left], [top, left + 1], [top + 1, left], [top + 1, left + 1]]
        )
        assert np.count_nonzero(obs[..., 1]) == 4  # The distractor's patch.
        action = state.cue if step % 2 == 0 else (state.cue + 1) % 4
        state, time_step = env.step(state, action)
        obs = time_step.obs
        rewards.append(float(time_step.reward))
        assert bool(time_step.terminated) == (step == 9) and not bool(time_step.truncated)
    assert rewards == [1.0, 0.0] * 5


def test_the_gymnasium_twin_lights_the_same_corners_channels_first():
    env = cue.FrameCue()
    obs, _ = env.reset(seed=0)
    assert env.observation_space["frame"].shape == obs["frame"].shape == (2, 6, 6)
    for corner in range(4):
        np.testing.assert_array_equal(
            env._corner(corner) == 255, grid_cue.corner(jnp.asarray(corner), 6)
        )
    ((top, left), *_) = np.argwhere(obs["frame"][0] == 255)
    assert env._cue == (top // 4) * 2 + left // 4
    _, reward, *_ = env.step(env._cue)
    assert reward == 1.0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(num_cues=5), "num_cues must be 2 to 4"),
        (dict(size=3), "size must be at least 4"),
        (dict(dtype="int8"), "unknown dtype 'int8'"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        grid_cue.GridCue(**settings)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["uint8"])  # A float grid reads the same (encoder_test).
def test_clipped_ppo_learns_the_cue_from_pixels_through_the_minatar_network(dtype):
    # 10 a episode for reading the cue, 2.5 by chance; 8 updates of 8 envs x 32 steps.
    env = jax_env.VmapBatch(jax_env.TimeLimit(grid_cue.GridCue(dtype=dtype), 10), 8)
    config = config_lib.ClippedConfig(
        steps_per_update=32, num_minibatches=4, update_epochs=4, learning_rate=1e-3
    )
    rows, state = loop_runs.train(
        config, env, train_steps=128, eval_steps=10, phases=2, max_length=10
    )
    assert set(state.agent.learner.params) == {"policy", "value", "policy_encoder", "value_encoder"}
    assert rows[-1]["eval/return"] > 8.0, rows

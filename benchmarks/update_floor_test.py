"""The update floor counts the FLOPs of the products each preset's updates compute."""

import pytest
import update_floor

from batchrl.configs import presets, train_config


def test_a_forward_pass_counts_two_flops_a_weight():
    assert update_floor.mlp_flops([3, 200, 100, 1]) == 2 * (3 * 200 + 200 * 100 + 100 * 1)


def test_a_backward_pass_skips_the_gradient_of_the_input():
    forward = update_floor.mlp_flops([348, 200, 17])
    assert update_floor.gradient_flops([348, 200, 17]) == forward + forward + 2 * 200 * 17


def test_the_seeds_objective_updates_on_whole_episodes_in_rows_of_chunks():
    sizes = update_floor.shapes(presets.get("pendulum_jax"))
    assert sizes["policy"] == [3, 200, 100, 1] and sizes["value"] == [3, 200, 100, 1]
    # 30 episodes of 200 steps; minibatches of 30 rows of 50 steps; 30 envs x 200 a phase.
    assert sizes["samples_per_update"] == 6000 and sizes["minibatch"] == 1500
    assert sizes["epochs"] == 25 and sizes["updates_per_phase"] == 1.0


def test_the_clipped_objective_updates_on_each_rollout_in_minibatches():
    config = train_config.replace(presets.get("cheetah_clipped"), num_envs=8)
    sizes = update_floor.shapes(config)
    assert sizes["policy"] == [17, 256, 256, 6] and sizes["value"] == [17, 256, 256, 1]
    # 8 envs x 128 steps, in 8 minibatches; a phase of 20,480 steps holds 20 of them.
    assert sizes["samples_per_update"] == 1024 and sizes["minibatch"] == 128
    assert sizes["updates_per_phase"] == 20.0


def test_a_categorical_policy_has_a_logit_an_action():
    sizes = update_floor.shapes(presets.get("cartpole_jax"))
    assert sizes["policy"] == [4, 200, 100, 2] and sizes["value"] == [4, 200, 100, 1]


def test_pixel_observations_are_refused_in_one_line():
    refused = r"^update_floor counts MLPs on one vector observation, got ObsLeaf"
    with pytest.raises(ValueError, match=refused):
        update_floor.shapes(presets.get("breakout_minatar"))

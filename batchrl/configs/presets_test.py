import math

import pytest

import batchrl
from batchrl import env_spec
from batchrl.configs import presets
from batchrl.ppo import policy as policy_lib
from batchrl.training import environments

PIXELS = [
    "breakout_minatar",
    "space_invaders_minatar",
    "asterix_minatar",
    "freeway_minatar",
    "minigrid_doorkey",
]
# Each preset's task and networks on 4 envs: one update of 16 steps each, one phase.
SMALL = dict(
    num_envs=4,
    steps_per_update=16,
    num_minibatches=2,
    update_epochs=1,
    phase_steps=64,
    eval_episodes=4,
    final_episodes=4,
)


@pytest.mark.parametrize("name", PIXELS)
def test_a_pixel_presets_env_is_an_image_read_by_the_minatar_network(name):
    config = presets.get(name)
    spec = environments.check_env(config)
    images = [leaf for leaf in env_spec.leaves(spec.observation) if leaf.kind == env_spec.IMAGE]
    assert len(images) == 1 and images[0].low == 0.0 and images[0].high in (1.0, 10.0)
    networks = policy_lib.Networks(config.algorithm, spec)
    assert [part.network for part in networks.parts if part.network] == ["minatar"]


@pytest.mark.slow
# One compiled on gymnax, one on worker envs; the other MinAtar presets differ from the
# first only in the game, whose env and networks the test above builds.
@pytest.mark.parametrize("name", ["breakout_minatar", "minigrid_doorkey"])
def test_a_pixel_preset_trains_one_phase(name):
    run = batchrl.train(name, steps=64, **SMALL)
    (row,) = run.metrics
    assert row["step"] == 64 and math.isfinite(row["final/return"])
    assert int(run.policy.learner.updates) == 1
    params = run.policy.learner.params
    assert set(params) == {"policy", "value", "policy_encoder", "value_encoder"}

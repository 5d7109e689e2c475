import math
import re

import pytest

import batchrl
from batchrl import env_spec
from batchrl.configs import overrides, presets, train_config
from batchrl.ppo import agent_networks
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


# gymnax-blines' agents/<game>/ppo.yaml for MinAtar: its settings by their names there,
# and ours for them (its lr_warmup ramps from lr_begin to lr_end, both 5e-4: constant).
GYMNAX_BLINES_PPO = {
    "num_envs": 64,  # num_train_envs
    "steps_per_update": 128,  # n_steps
    "num_minibatches": 8,  # n_minibatch
    "update_epochs": 4,  # epoch_ppo
    "learning_rate": 5e-4,  # lr_begin, lr_end
    "max_grad_norm": 0.5,
    "discount": 0.999,  # gamma
    "gae_lambda": 0.95,
    "clip_ratio": 0.2,  # clip_eps
    "entropy_coef": 0.01,  # entropy_coeff
    "value_coef": 0.5,  # critic_coeff
    "policy_layers": [256, 256],  # num_hidden_layers x num_hidden_units
    "value_layers": [256, 256],
    "activation": "relu",
    "steps": 10_000_000,  # num_train_steps
}


@pytest.mark.parametrize("name", PIXELS)
def test_a_pixel_presets_env_is_one_image_read_as_its_source_reads_it(name):
    config = presets.get(name)
    spec = environments.check_env(config)
    images = [leaf for leaf in env_spec.leaves(spec.observation) if leaf.kind == env_spec.IMAGE]
    assert len(images) == 1 and images[0].low == 0.0 and images[0].high in (1.0, 10.0)
    networks = agent_networks.Networks(config.algorithm, spec)
    cnns = [part.network for part in networks.parts if part.network]
    # MinAtar as gymnax-blines trained it: the grid flattened into the MLP.
    assert cnns == (["minatar"] if name == "minigrid_doorkey" else [])
    if name != "minigrid_doorkey":
        settings = train_config.flat(config)
        assert {key: settings[key] for key in GYMNAX_BLINES_PPO} == GYMNAX_BLINES_PPO


@pytest.mark.slow
# One compiled on gymnax, one on worker envs; the other MinAtar presets differ from the
# first only in the game, whose env and networks the test above builds.
@pytest.mark.parametrize(
    "name, networks",
    [
        ("breakout_minatar", {"policy", "value"}),
        ("minigrid_doorkey", {"policy", "value", "policy_encoder", "value_encoder"}),
    ],
)
def test_a_pixel_preset_trains_one_phase(name, networks):
    run = batchrl.train(name, steps=64, **SMALL)
    (row,) = run.metrics
    assert row["step"] == 64 and math.isfinite(row["final/return"])
    assert int(run.policy.learner.updates) == 1
    assert set(run.policy.learner.params) == networks


ATARI = {"breakout": "ALE/Breakout-v5", "pong": "ALE/Pong-v5", "beam_rider": "ALE/BeamRider-v5"}
# CleanRL's ppo_atari.py: its settings by their names there, and ours for them.
CLEANRL_PPO_ATARI = {
    "num_envs": 8,
    "steps_per_update": 128,  # num_steps
    "num_minibatches": 4,
    "update_epochs": 4,
    "learning_rate": 2.5e-4,
    "anneal_learning_rate": True,  # anneal_lr
    "discount": 0.99,  # gamma
    "gae_lambda": 0.95,
    "normalize_advantages": True,  # norm_adv
    "clip_ratio": 0.1,  # clip_coef
    "clip_value": 0.1,  # clip_vloss, at clip_coef
    "entropy_coef": 0.01,  # ent_coef
    "value_coef": 0.5,  # vf_coef
    "max_grad_norm": 0.5,
    "target_kl": None,
    "steps": 10_000_000,  # total_timesteps
}


@pytest.mark.parametrize("name", list(ATARI))
def test_an_atari_preset_is_cleanrls_ppo_atari_on_ale_pys_games(name):
    config = presets.get(name)
    settings = train_config.flat(config)
    assert {key: settings[key] for key in CLEANRL_PPO_ATARI} == CLEANRL_PPO_ATARI
    assert config.env == ATARI[name] and config.backend == "ale"
    spec = environments.check_env(config)
    (frames,) = env_spec.leaves(spec.observation)
    assert frames.shape == (4, 84, 84) and frames.dtype == "uint8"
    networks = agent_networks.Networks(config.algorithm, spec)
    assert [part.network for part in networks.parts if part.network] == ["nature"]
    assert config.algorithm.shared_encoder and not config.algorithm.normalize_rewards
    # Scored with sampled actions, as CleanRL's curves and the RL Zoo's enjoy.py score Atari.
    assert config.eval_sample


def test_only_the_atari_presets_evaluate_sampled_actions():
    sampling = [name for name in presets.PRESETS if presets.get(name).eval_sample]
    assert sorted(sampling) == sorted(ATARI)


def test_the_atari_presets_train_on_lost_lives_and_clipped_rewards_and_evaluate_whole_games():
    config = presets.get("breakout")
    _, train_env = environments.build(config)
    _, eval_env = environments.build_eval(config)
    with train_env, eval_env:
        (training,), (evaluation,) = train_env._groups, eval_env._groups
        train, evaluate = training.settings.options, evaluation.settings.options
    assert train["life_loss_info"] and train["reward_clipping"]
    assert not (evaluate["life_loss_info"] or evaluate["episodic_life"])
    assert not evaluate["reward_clipping"]
    # Both: no sticky actions, as CleanRL's NoFrameskip-v4 games; 30 minutes of play at most.
    for options in (train, evaluate):
        assert options["repeat_action_probability"] == 0.0
        assert options["max_num_frames_per_episode"] == 108_000


def test_any_atari_game_is_one_override_away():
    config = overrides.parse_override(presets.get("breakout"), "env=ALE/Seaquest-v5")
    assert environments.check_env(config).num_actions == 18


@pytest.mark.slow
def test_an_atari_preset_trains_one_phase():
    # Whole games of the untrained policy may last to the time limit: 100 steps here.
    run = batchrl.train("breakout", steps=64, max_length=100, **SMALL)
    (row,) = run.metrics
    assert row["step"] == 64 and math.isfinite(row["final/return"])
    assert int(run.policy.learner.updates) == 1
    assert set(run.policy.learner.params) == {"policy", "value", "encoder"}


def test_an_atari_preset_on_rgb_frames_is_refused_before_a_run_folder(tmp_path):
    # ale-py stacks RGB frames as [4, 84, 84, 3], no image of rank 3: the Nature CNN would
    # read nothing and the MLP the raw pixels, its first update's KL in the hundreds.
    options = {**presets.get("breakout").env_kwargs, "grayscale": False}
    with pytest.raises(ValueError, match=r"cnn='nature' reads images.*obs \(4, 84, 84, 3\)"):
        batchrl.train(
            "breakout", steps=64, max_length=100, logdir=tmp_path, env_kwargs=options, **SMALL
        )
    assert list(tmp_path.iterdir()) == []


# pointmaze's env is in the robotics extra, which the test extras leave out.
@pytest.mark.parametrize("name", [name for name in presets.PRESETS if name != "pointmaze"])
def test_a_preset_sets_nothing_its_env_leaves_unread(name, caplog):
    # A setting no code reads on the preset's env is said at start (`unread`, and a
    # max_length beyond the env's own limit): reacher_clipped's max_length=1000 was one.
    config = presets.get(name)
    checked, spec = environments.check_run(config)
    assert checked == config
    assert config.algorithm.unread(spec) == []
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.parametrize(
    "name, said",
    [
        ("CartPole-v1", r"not a preset \(presets that train it: cartpole, cartpole_jax\); "),
        ("ALE/Breakout-v5", r"not a preset \(presets that train it: breakout\); "),
        ("LunarLander-v3", r"not a preset; "),
        ("my_envs:Maze", r"not a preset; "),
    ],
)
def test_an_env_given_as_a_preset_is_said_to_be_one(name, said):
    # As Stable-Baselines3's PPO("MlpPolicy", "CartPole-v1") takes an env's name.
    given = rf"a preset on the processes backend trains it given env={re.escape(name)}; choose"
    with pytest.raises(
        ValueError, match=rf"^unknown config '{re.escape(name)}': that is an env, {said}{given}"
    ):
        presets.get(name)


def test_a_jax_native_envs_name_is_said_to_be_one_without_the_processes_backend():
    with pytest.raises(ValueError) as raised:
        presets.get("Breakout-MinAtar")
    said = "that is an env, not a preset (presets that train it: breakout_minatar); choose"
    assert said in str(raised.value)


def test_a_name_of_no_env_gets_no_env_hint():
    with pytest.raises(ValueError) as raised:
        presets.get("nope")
    assert "env" not in str(raised.value).split("choose one of")[0]

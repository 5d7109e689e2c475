import pytest

from batchrl.scripts import train
from batchrl.training import api


def _warned(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if "env_kwargs of the config's env" in r.getMessage()
    ]


def test_another_env_on_a_preset_leaves_out_the_keywords_it_does_not_take(caplog):
    # minigrid_doorkey's env_id went on to the user's env, which failed for a keyword the
    # user never set: "takes no keyword 'env_id' in env_kwargs".
    config, _, _ = api.configure("minigrid_doorkey", env="CartPole-v1")
    assert config.env == "CartPole-v1" and config.env_kwargs == {}
    assert _warned(caplog) == [
        "env='CartPole-v1' takes no {env_id: 'MiniGrid-DoorKey-5x5-v0'}, env_kwargs of the "
        "config's env 'batchrl.envs.host.minigrid_env:make': left out (set env_kwargs for its own)"
    ]
    # Those the new env takes stay: Humanoid's observation as the preset trains it.
    caplog.clear()
    args = train.parse_args(["--logdir", "runs", "--config", "humanoid_clipped"])
    args.set = ["env=HumanoidStandup-v5"]
    standup = train.requested_config(args)
    assert standup.env_kwargs == {"include_cfrc_ext_in_observation": False}
    assert not _warned(caplog)
    args.set = ["env=HalfCheetah-v5"]
    assert train.requested_config(args).env_kwargs == {}
    assert (
        "env='HalfCheetah-v5' takes no {include_cfrc_ext_in_observation: False}"
        in (_warned(caplog)[0])
    )


@pytest.mark.parametrize("where", ["api", "command"])
def test_env_kwargs_given_with_the_env_or_an_atari_games_options_are_kept(where, caplog):
    if where == "api":
        config, _, _ = api.configure("ant_clipped", env="HalfCheetah-v5", env_kwargs={})
        assert config.env_kwargs == {}
        pong, _, _ = api.configure("breakout", env="ALE/Pong-v5")
    else:
        args = train.parse_args(["--logdir", "runs", "--config", "minigrid_doorkey"])
        args.set = ["env=batchrl.envs.host.minigrid_env:make", "env_kwargs={env_id: X-v0}"]
        assert train.requested_config(args).env_kwargs == {"env_id": "X-v0"}
        args = train.parse_args(["--logdir", "runs", "--config", "breakout"])
        args.set = ["env=ALE/Pong-v5"]
        pong = train.requested_config(args)
    assert pong.env_kwargs["repeat_action_probability"] == 0.0  # ale-py's, for any game.
    assert not _warned(caplog)

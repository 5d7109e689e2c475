"""atari.single: one Gymnasium env that plays each step as an env of BatchEnv.atari."""

import numpy as np
import pytest

from batchrl.envs import BatchEnv
from batchrl.envs.atari import single

# No no-op starts and no sticky actions: ale-py and the env draw them from different
# generators, so only then does a game have one course in both.
ONE_COURSE = dict(noop_max=0, repeat_action_probability=0.0)


def play_side_by_side(game, options, steps):
    """Steps both with the same random actions, resetting on ends; asserts equal results.

    Returns the rewards and the number of episodes that ended.
    """
    ours = single.make(game, options)
    rewards, ends = [], 0
    with BatchEnv.atari(game, 1, autoreset_mode="disabled", **options) as theirs:
        assert ours.observation_space == theirs.single_observation_space
        assert ours.action_space == theirs.single_action_space
        got, want = ours.reset(seed=5), theirs.reset(seed=5)
        actions = np.random.default_rng(0).integers(0, ours.action_space.n, steps)
        for t, action in enumerate(actions):
            np.testing.assert_array_equal(got[0], want[0][0], err_msg=f"obs before step {t}")
            for key in ("lives", "episode_frame_number"):
                assert got[-1][key] == want[-1][key][0], f"{key} before step {t}"
            got, want = ours.step(action), theirs.step(np.array([action]))
            names = ("reward", "terminated", "truncated")
            for name, a, b in zip(names, got[1:4], want[1:4], strict=True):
                assert a == b[0], f"{name} at step {t}: {a} != {b[0]}"
            rewards.append(got[1])
            if got[2] or got[3]:
                ends += 1
                got, want = ours.reset(), theirs.reset(options={"reset_mask": np.ones(1, bool)})
    ours.close()
    return np.array(rewards), ends


def test_whole_games_with_fire_starts_and_the_games_own_rewards():
    # Space Invaders pays 5 to 30 a hit; FIRE at a game's start is on, as ale-py's default.
    options = {**ONE_COURSE, "reward_clipping": False}
    rewards, ends = play_side_by_side("space_invaders", options, steps=1200)
    assert rewards.max() > 1 and ends >= 1  # Unclipped rewards and a game over compared.


def test_a_frame_budget_ends_within_a_step_as_ale_pys():
    # 402 frames end the 101st step after its second frame; Breakout scores 1 a brick.
    options = {**ONE_COURSE, "max_num_frames_per_episode": 402}
    _, ends = play_side_by_side("breakout", options, steps=350)
    assert ends == 3


def test_other_frames_lost_lives_and_clipped_rewards():
    options = {
        **ONE_COURSE,
        "frameskip": 3,
        "img_height": 60,
        "img_width": 50,
        "grayscale": False,
        "stack_num": 2,
        "episodic_life": True,
        "max_num_frames_per_episode": 600,
    }
    rewards, ends = play_side_by_side("ALE/SpaceInvaders-v5", options, steps=400)
    assert single.make("breakout", options).observation_space.shape == (2, 60, 50, 3)
    assert set(np.unique(rewards)) == {0.0, 1.0} and ends >= 2


@pytest.mark.parametrize("fire", [True, False])
def test_a_game_starts_after_as_many_frames_as_in_ale_py(fire):
    # ale-py draws 0 to noop_max - 1 frames, FIRE the first; each seed its own draw.
    options = {"noop_max": 3, "use_fire_reset": fire}
    env = single.make("breakout", options)
    ours = {env.reset(seed=seed)[1]["episode_frame_number"] for seed in range(12)}
    with BatchEnv.atari("breakout", 12, **options) as batch:
        theirs = set(batch.reset(seed=0)[1]["episode_frame_number"].tolist())
    assert ours == theirs == ({1, 2} if fire else {0, 1, 2})


def test_renders_the_games_screen_at_the_games_speed():
    env = single.make("ALE/Breakout-v5", {}, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8  # As BatchEnv.atari's.
    env.step(1)
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8 and frame.std() > 0
    assert env.metadata["render_fps"] == 15  # 60 frames a second, 4 a step.


@pytest.mark.parametrize(
    ("game", "options", "message"),
    [
        ("pong", {"life_loss_info": True}, r"cannot play a game on .*episodic_life=True"),
        ("pong", {"maxpool": False}, r"max-pools the last two frames: no maxpool=False"),
        ("joust", {}, r"'joust' has no single-player Gymnasium env"),
        ("pong", {"episodic_lives": True}, r"unknown option 'episodic_lives'"),
        ("pong", {"noop_max": -3}, r"noop_max must be a whole number of at least 0, got -3"),
    ],
)
def test_an_option_without_a_gymnasium_wrapper_is_refused_in_one_line(game, options, message):
    with pytest.raises(ValueError, match=message) as error:
        single.make(game, options)
    assert "\n" not in str(error.value)

"""BatchEnv.atari against Gymnasium's Atari preprocessing and ale-py's own vector env."""

import os

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv
from batchrl.envs.atari import single
from batchrl.envs.host.split_test import one_core
from batchrl.envs.host.vector_test import assert_same_infos

gym.register_envs(ale_py)

MODES = list(AutoresetMode)
# The envs compared with are `single.make`'s with these options, where it is Gymnasium's
# wrappers alone: AtariPreprocessing and a zero-padded FrameStackObservation over
# `gym.make(id, frameskip=1)`. No no-op starts and no FIRE at reset (ale-py draws no-ops
# from its own generator; Gymnasium has no fire reset), no sticky actions (ale-py seeds
# the emulator's generator with the seed itself, Gymnasium with one drawn from it),
# rewards as the game gives them.
AS_GYMNASIUM = dict(
    noop_max=0, use_fire_reset=False, repeat_action_probability=0.0, reward_clipping=False
)
FIRE = 1  # In Breakout's and Space Invaders' minimal action sets.


def without_seeds(infos):
    """Gymnasium's infos less the seeds its envs report at a seeded reset."""
    return {k: v for k, v in infos.items() if k not in ("seeds", "_seeds")}


def run_side_by_side(ours, theirs, steps, seed):
    """Steps both with the same random actions; asserts equal results; counts episode ends."""
    mode = theirs.metadata["autoreset_mode"]
    got, want = ours.reset(seed=seed), theirs.reset(seed=seed)
    np.testing.assert_array_equal(got[0], want[0])
    assert_same_infos(got[1], without_seeds(want[1]), "first reset")
    theirs.action_space.seed(seed)
    ends = 0
    for t in range(steps):
        action = theirs.action_space.sample()
        got, want = ours.step(action), theirs.step(action)
        names = ("obs", "reward", "terminated", "truncated")
        for name, a, b in zip(names, got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} at step {t}")
        assert_same_infos(got[4], want[4], f"infos at step {t}")
        done = want[2] | want[3]
        ends += int(done.sum())
        if mode is AutoresetMode.DISABLED and done.any():
            options = {"reset_mask": done}
            got, want = ours.reset(options=dict(options)), theirs.reset(options=dict(options))
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"reset obs at step {t}")
            assert_same_infos(got[1], want[1], f"reset infos at step {t}")
    return ends


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_the_same_episodes_as_gymnasiums_preprocessing_in_every_autoreset_mode(mode):
    # A lost life ends the episode in both, so every mode's resets come often.
    theirs = gym.vector.SyncVectorEnv(
        [lambda: single.make("ALE/Breakout-v5", {**AS_GYMNASIUM, "episodic_life": True})] * 4,
        autoreset_mode=mode,
    )
    with BatchEnv.atari(
        "ALE/Breakout-v5", 4, autoreset_mode=mode, episodic_life=True, **AS_GYMNASIUM
    ) as ours:
        assert ours.single_observation_space == theirs.single_observation_space
        assert ours.single_action_space == theirs.single_action_space
        ends = run_side_by_side(ours, theirs, steps=150, seed=7)
    theirs.close()
    assert ends >= 8


def test_whole_games_and_clipped_rewards_are_gymnasiums_with_its_reward_clipped():
    # Space Invaders pays 5 to 30 a hit, so clipping changes rewards; FIRE all along ends
    # a game within a few hundred steps.
    theirs = gym.vector.SyncVectorEnv(
        [lambda: single.make("ALE/SpaceInvaders-v5", AS_GYMNASIUM)] * 2
    )
    options = {**AS_GYMNASIUM, "reward_clipping": True}
    with BatchEnv.atari("ALE/SpaceInvaders-v5", 2, **options) as ours:
        ours.reset(seed=3)
        theirs.reset(seed=3)
        raw, clipped, ends = [], [], 0
        for t in range(800):
            got, want = ours.step(np.full(2, FIRE)), theirs.step(np.full(2, FIRE))
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"obs at step {t}")
            np.testing.assert_array_equal(got[2], want[2], err_msg=f"terminated at step {t}")
            raw.append(want[1])
            clipped.append(got[1])
            ends += int(want[2].sum())
    theirs.close()
    np.testing.assert_array_equal(clipped, np.clip(raw, -1, 1))
    assert np.max(raw) > 1 and ends >= 2  # Clipping and whole games were both compared.


def test_env_i_seeded_with_seed_plus_i_plays_as_ale_pys_env_of_that_seed():
    # No-op starts and sticky actions on: both draw from the seed.
    actions = np.random.default_rng(0).integers(0, 4, (60, 3))
    with BatchEnv.atari("ALE/Breakout-v5", 3) as ours:
        obs = [ours.reset(seed=20)[0]]
        obs += [ours.step(a)[0] for a in actions]
    theirs = AtariVectorEnv("breakout", 1, repeat_action_probability=0.25)
    want = [theirs.reset(seed=22)[0]]
    want += [theirs.step(a[2:])[0] for a in actions]
    theirs.ale = None
    np.testing.assert_array_equal(np.array(obs)[:, 2], np.array(want)[:, 0])
    assert not np.array_equal(np.array(obs)[:, 0], np.array(obs)[:, 2])


def test_the_spec_builds_the_same_games_with_gymnasium():
    # numpy's ints too, which ale-py alone refuses as a frameskip.
    with BatchEnv.atari("pong", 2, noop_max=np.int64(5), frameskip=np.int64(3)) as ours:
        spec = ours.spec
        assert spec.id == "ALE/Pong-v5" and spec.kwargs["frameskip"] == 3
        assert spec.kwargs["repeat_action_probability"] == 0.0  # AtariVectorEnv's default.
        theirs = gym.make_vec(spec, 2)
        np.testing.assert_array_equal(ours.reset(seed=1)[0], theirs.reset(seed=1)[0])
        for t in range(30):
            got, want = ours.step(np.full(2, 2)), theirs.step(np.full(2, 2))
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"obs at step {t}")
        theirs.ale = None
    with BatchEnv.atari("ALE/Pong-v5", 1) as v5:
        assert v5.spec.kwargs["repeat_action_probability"] == 0.25


def fire_until(env, count):
    """Steps with FIRE until `count` episodes ended; the steps' (obs, terminated, lives)."""
    seen, ended = [], 0
    while ended < count:
        obs, _, terminated, truncated, infos = env.step(np.full(env.num_envs, FIRE))
        seen.append((obs, terminated, infos["lives"]))
        ended += int(terminated.sum())
        assert not truncated.any()
    return seen


def test_with_life_loss_info_a_reset_after_a_lost_life_plays_the_game_on():
    with BatchEnv.atari(
        "breakout", 1, life_loss_info=True, noop_max=0, autoreset_mode="disabled"
    ) as env:
        env.reset(seed=0)
        lives = []
        for _ in range(5):  # Breakout's five lives, lost with the paddle still.
            obs, _, now = fire_until(env, 1)[-1]
            lives.append(int(now[0]))
            again, infos = env.reset(options={"reset_mask": np.ones(1, bool)})
            if now[0]:  # A life lost: the game goes on from where it is.
                np.testing.assert_array_equal(again, obs)
                assert infos["lives"][0] == now[0]
    assert lives == [4, 3, 2, 1, 0]
    # The game over started a new game: the FIRE of its start is its only frame.
    assert infos["lives"][0] == 5 and infos["episode_frame_number"][0] == 1


def test_with_life_loss_info_same_step_resets_only_a_game_over():
    with BatchEnv.atari("breakout", 1, life_loss_info=True, autoreset_mode="same_step") as env:
        env.reset(seed=0)
        seen = fire_until(env, 5)
        infos = env.step(np.full(1, FIRE))[4]  # The step after the game over.
    ends = [lives[0] for _, terminated, lives in seen if terminated[0]]
    # Four lost lives ended episodes with the game on; the fifth, its end, started a new
    # game at once, its final info beside the new game's.
    assert ends == [4, 3, 2, 1, 5]
    assert infos["lives"][0] == 5


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_each_steps_obs_are_the_callers_to_keep_through_later_steps_and_resets(mode):
    with BatchEnv.atari("breakout", 2, noop_max=0, autoreset_mode=mode) as env:
        env.reset(seed=0)
        kept, ends, after = [], 0, 0
        while after < 2:  # Both games over, then two steps (NEXT_STEP resets in them).
            obs, _, terminated, truncated, _ = env.step(np.full(2, FIRE))
            kept.append((obs, obs.copy()))
            after += ends >= 2
            done = terminated | truncated
            ends += int(done.sum())
            if mode is AutoresetMode.DISABLED and done.any():
                env.reset(options={"reset_mask": done})
    for t, (held, copy) in enumerate(kept):
        np.testing.assert_array_equal(held, copy, err_msg=f"step {t}")
        assert held.flags.writeable


def test_a_steps_obs_edited_in_place_leave_a_later_masked_reset_as_the_step_gave_them():
    # As AsyncVectorEnv's: the envs not reset answer their last step's obs, not the caller's
    # edits of the arrays it was handed.
    with BatchEnv.atari("breakout", 2, noop_max=0, autoreset_mode="disabled") as env:
        env.reset(seed=0)
        obs = env.step(np.full(2, FIRE))[0]
        given = obs.copy()
        obs[...] = 7
        again, _ = env.reset(options={"reset_mask": np.array([True, False])})
    np.testing.assert_array_equal(again[1], given[1])


def test_a_step_a_ctrl_c_left_unread_leaves_the_next_reset_as_a_fresh_batchs():
    # ale-py answers each call with the oldest results not read: every step after the
    # reset returned the step before it, for good.
    with (
        BatchEnv.atari("breakout", 2, threads=1) as env,
        BatchEnv.atari("breakout", 2, threads=1) as fresh,
    ):
        env.reset(seed=0)
        env._groups[0].step_async(np.ones(2, np.int64), AutoresetMode.NEXT_STEP)  # Cut off.
        for batch in (env, fresh):
            batch.reset(seed=0)
        for t in range(3):
            actions = np.full(2, t % 4, np.int64)
            got, want = env.step(actions), fresh.step(actions)
            np.testing.assert_array_equal(got[0], want[0])
            assert_same_infos(got[4], want[4], f"step {t}")


def task_count():
    return len(os.listdir("/proc/self/task"))


def test_close_ends_the_games_threads_even_in_a_step():
    before = task_count()
    env = BatchEnv.atari("breakout", 3, threads=2)
    assert task_count() == before + 2
    env.reset(seed=0)
    env._groups[0].step_async(np.zeros(3, np.int64), AutoresetMode.NEXT_STEP)  # Not collected.
    env.close()
    assert task_count() == before
    env.close()  # Twice is fine.
    with pytest.raises(gym.error.ClosedEnvironmentError):
        env.step(np.zeros(3, np.int64))


@pytest.mark.parametrize(
    ("game", "options", "message"),
    [
        ("braekout", {}, r"unknown Atari game 'braekout': .*; did you mean 'breakout'\?$"),
        ("CartPole-v1", {}, r"unknown Atari game 'CartPole-v1'"),
        # CleanRL's id: a known game, of ale-py's single env.
        ("BreakoutNoFrameskip-v4", {}, r"'BreakoutNoFrameskip-v4' is an id of ale-py's single "),
        ("Pong-v4", {}, r"name the game 'pong' or 'ALE/Pong-v5', and its settings as options"),
        ("pong", {"episodic_lives": True}, r"unknown option 'episodic_lives' .*episodic_life"),
        ("pong", {"num_threads": 2}, r"sets num_threads itself: give BatchEnv.atari's threads"),
        ("pong", {"batch_size": 2}, r"sets batch_size itself: a BatchEnv steps every env"),
        # ale-py plays on with a probability past 1, repeating every action: none is played.
        ("pong", {"repeat_action_probability": 1.5}, r"probability must be a number from 0 to 1"),
        ("pong", {"stack_num": 0}, r"stack_num must be a whole number of at least 1, got 0"),
        ("pong", {"img_width": 8.5}, r"img_width must be a whole number of at least 1, got 8.5"),
        ("pong", {"grayscale": "no"}, r"grayscale must be True or False, got 'no'"),
    ],
)
def test_a_bad_game_or_option_is_refused_in_one_line(game, options, message):
    with pytest.raises(ValueError, match=message) as error:
        BatchEnv.atari(game, 2, **options)
    assert "\n" not in str(error.value)


def test_the_default_threads_are_the_cores_this_process_may_run_on():
    # ale-py's own default (num_threads=0) starts one thread per core of the machine.
    with one_core(), BatchEnv.atari("pong", 4) as env:
        (group,) = env.groups
        assert group.threads == 1


def new_threads_affinity(make):
    """What `make()` returns, and the CPU affinity of each thread it started, by thread id."""
    before = set(os.listdir("/proc/self/task"))
    made = make()
    started = set(os.listdir("/proc/self/task")) - before
    return made, [os.sched_getaffinity(int(task)) for task in sorted(started, key=int)]


def test_threads_on_every_core_are_pinned_one_to_each_unless_told_otherwise():
    allowed = os.sched_getaffinity(0)
    env, pinned = new_threads_affinity(lambda: BatchEnv.atari("pong", 4))
    with env:
        assert sorted(pinned, key=min) == [{core} for core in sorted(allowed)]
        assert env.spec.kwargs["thread_affinity_offset"] == min(allowed)
    env, unpinned = new_threads_affinity(
        lambda: BatchEnv.atari("pong", 4, thread_affinity_offset=-1)
    )
    with env:
        assert unpinned == [allowed] * len(allowed)
        assert env.spec.kwargs["thread_affinity_offset"] == -1
    if len(allowed) > 1:  # Fewer threads than cores: left to the scheduler.
        env, fewer = new_threads_affinity(lambda: BatchEnv.atari("pong", 4, threads=1))
        with env:
            assert fewer == [allowed]


@pytest.mark.parametrize(
    ("count", "message"),
    [
        ({"threads": 0}, r"threads must be a whole number of at least 1 or None .*, got 0"),
        ({"threads": 1.5}, r"threads must be a whole number of at least 1 or None .*, got 1.5"),
        ({"num_envs": 2.0}, r"num_envs must be a whole number of at least 1, got 2.0"),
        ({"num_envs": "2"}, r"num_envs must be a whole number of at least 1, got '2'"),
    ],
)
def test_a_count_that_is_not_a_whole_number_is_named_in_one_line(count, message):
    with pytest.raises(ValueError, match=message) as error:
        BatchEnv.atari("pong", **{"num_envs": 2, **count})
    assert "\n" not in str(error.value)


def test_bad_seeds_and_first_resets_are_refused_in_one_line():
    with BatchEnv.atari("pong", 2) as env:
        with pytest.raises(ValueError, match=r"resets every env first, then any of them"):
            env.reset_at([1])
        with pytest.raises(gym.error.ResetNeeded, match="only after a reset"):
            env.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match=r"seed must be at least 0, got -3"):
            env.reset(seed=[1, -3])
        # Seeds past C++'s int, which Gymnasium's runs draw, count modulo 2**31.
        big, _ = env.reset(seed=[2**32 - 1, 2**31 + 7])
        small, _ = env.reset(seed=[2**31 - 1, 7])
        np.testing.assert_array_equal(big, small)
        assert env.np_random_seed == (2**31 - 1, 7)
        with pytest.raises(AttributeError, match=r"have no 'ale'.*answer spec, render_mode"):
            env.get_attr("ale")
        # An action outside the game's hung ale-py's threads, past Ctrl-C.
        for bad in (6, -1):
            with pytest.raises(ValueError, match=rf"^env 1's action {bad} is not in Discrete\(6\)"):
                env.step(np.array([0, bad]))
        env.step(np.array([0, 5]))  # The batch steps on.

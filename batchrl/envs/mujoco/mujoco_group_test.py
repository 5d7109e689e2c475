"""BatchEnv.mujoco against Gymnasium's own envs: the same episodes, bit for bit."""

import os
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv
from batchrl.envs.host.split_test import one_core
from batchrl.envs.host.vector_test import run_side_by_side
from batchrl.envs.mujoco import mujoco_group, tasks

MODES = list(AutoresetMode)


def _tasks_and_modes():
    """Every task but the two largest in the default mode, and Hopper's terminations in
    every mode, quick; the rest slow."""
    for env_id in tasks.TASKS:
        for mode in MODES:
            default = mode == AutoresetMode.NEXT_STEP and env_id not in ("Ant-v5", "Humanoid-v5")
            quick = default or env_id == "Hopper-v5"
            marks = () if quick else pytest.mark.slow
            yield pytest.param(env_id, mode, id=f"{env_id}-{mode.name}", marks=marks)


@pytest.mark.parametrize(("env_id", "mode"), list(_tasks_and_modes()))
def test_equals_gymnasium_through_terminations_and_time_limits(env_id, mode):
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 4, autoreset_mode=mode)
    with BatchEnv.mujoco(env_id, 4, threads=2, autoreset_mode=mode) as ours:
        ends = run_side_by_side(ours, theirs, steps=1000, seed=7)
    theirs.close()
    # Every task's episode ends were compared: HalfCheetah's time limits (4), or more.
    assert ends >= 4


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Humanoid-v5"])
def test_float64_actions_act_as_on_gymnasiums_envs(env_id):
    # Rounded to float32 on the way, they moved the envs and control costs a rounding
    # apart (HalfCheetah's observations 2e-5 after a few hundred steps).
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 3)
    with BatchEnv.mujoco(env_id, 3, threads=2) as ours:
        run_side_by_side(ours, theirs, steps=200, seed=5, dtype=np.float64)
    theirs.close()


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("Hopper-v5", {"ctrl_cost_weight": 0.5, "healthy_z_range": (1.0, 2.0)}),
        ("Ant-v5", {"include_cfrc_ext_in_observation": False, "max_episode_steps": 60}),
        ("Humanoid-v5", {"include_cinert_in_observation": False, "reset_noise_scale": 0.1}),
        ("HalfCheetah-v5", {"exclude_current_positions_from_observation": False}),
        ("Swimmer-v5", {"exclude_current_positions_from_observation": False}),
    ],
)
def test_gymnasium_constructor_keywords_mean_the_same(env_id, kwargs):
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **kwargs)] * 3)
    with BatchEnv.mujoco(env_id, 3, **kwargs) as ours:
        assert ours.single_observation_space == theirs.single_observation_space
        run_side_by_side(ours, theirs, steps=200, seed=3)
    theirs.close()


def test_resets_fall_back_to_mujoco_when_the_state_fields_are_incomplete(monkeypatch):
    # A MuJoCo whose state has a component the group does not list: resets go to
    # Batch.reset, and the episodes stay Gymnasium's.
    fields = tuple(f for f in mujoco_group._INTEGRATION_STATE if f != "qacc_warmstart")
    monkeypatch.setattr(mujoco_group, "_INTEGRATION_STATE", fields)
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")] * 3)
    with BatchEnv.mujoco("Hopper-v5", 3) as ours:
        assert run_side_by_side(ours, theirs, steps=300, seed=5) >= 3
    theirs.close()


def test_any_thread_count_gives_the_same_episodes():
    results = []
    for threads in (1, 2, 3):
        with BatchEnv.mujoco("Ant-v5", 5, threads=threads) as env:
            obs, _ = env.reset(seed=11)
            rng = np.random.default_rng(0)
            for _ in range(50):
                obs, reward, *_ = env.step(rng.uniform(-1, 1, (5, 8)).astype(np.float32))
            results.append((obs, reward))
    for obs, reward in results[1:]:
        np.testing.assert_array_equal(obs, results[0][0])
        np.testing.assert_array_equal(reward, results[0][1])


def test_step_into_and_reset_at_serve_the_bridge():
    with BatchEnv.mujoco("Hopper-v5", 3) as env:
        obs, _ = env.reset_at(seed=5)
        single = gym.make("Hopper-v5")
        np.testing.assert_array_equal(obs[1], single.reset(seed=6)[0])
        out = np.empty((3, 11)), np.empty(3), np.empty(3, bool), np.empty(3, bool)
        action = np.full((3, 3), 0.5, np.float32)
        env.step_into(action, *out)
        want = single.step(action[1])
        np.testing.assert_array_equal(out[0][1], want[0])
        assert out[1][1] == want[1]
        again, _ = env.reset_at([1], seed=[6])
        np.testing.assert_array_equal(again[0], single.reset(seed=6)[0])


def test_reset_at_takes_envs_in_any_order():
    with BatchEnv.mujoco("Walker2d-v5", 4) as env:
        env.reset(seed=0)
        env.step(np.full((4, 6), 0.3, np.float32))
        obs, infos = env.reset_at([3, 0, 2], seed=[30, 10, 20])
        for n, seed in enumerate((30, 10, 20)):
            want_obs, want_info = gym.make("Walker2d-v5").reset(seed=seed)
            np.testing.assert_array_equal(obs[n], want_obs)
            assert infos[n]["x_position"] == want_info["x_position"]


def test_each_env_answers_with_its_own_random_generator_and_seed():
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")] * 3)
    with BatchEnv.mujoco("Hopper-v5", 3, threads=1) as ours:
        ours.reset(seed=5)
        theirs.reset(seed=5)
        assert ours.np_random_seed == theirs.np_random_seed == (5, 6, 7)
        draws = [[rng.random() for rng in env.np_random] for env in (ours, theirs)]
        assert draws[0] == draws[1] and len(set(draws[0])) == 3
    theirs.close()


def test_each_env_answers_with_its_own_state():
    state = ("time", "qpos", "qvel", "ctrl")  # Not the fields derived before the last substep.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")] * 3)
    with BatchEnv.mujoco("Hopper-v5", 3, threads=1) as ours:
        for env in (ours, theirs):
            env.reset(seed=2)
            for _ in range(4):
                env.step(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3))
        for name in ("get_attr", "call"):
            got, want = (getattr(env, name)("data") for env in (ours, theirs))
            for ours_data, their_data in zip(got, want, strict=True):
                for field in state:
                    a, b = getattr(ours_data, field), getattr(their_data, field)
                    np.testing.assert_array_equal(a, b, err_msg=f"{name} {field}")
        assert ours.get_attr("_elapsed_steps") == theirs.get_attr("_elapsed_steps") == (4,) * 3
        assert ours.call("np_random_seed") == theirs.call("np_random_seed") == (2, 3, 4)
        assert ours.np_random_seed == theirs.np_random_seed and len(ours.np_random) == 3
        # Read so, each env stepped on from the state last loaded, not its own.
        for _ in range(3):
            got, want = (env.step(np.full((3, 3), 0.5, np.float32))[0] for env in (ours, theirs))
            np.testing.assert_array_equal(got, want)
    theirs.close()


def test_a_call_that_sets_the_state_moves_its_env_as_on_gymnasiums():
    # It ran on the envs' shared Gymnasium env alone: each env stepped on from its old state.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")] * 2)
    actions = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    with BatchEnv.mujoco("Hopper-v5", 2, threads=1) as ours:
        qpos, qvel = np.array([0.0, 1.3, 0.2, 0.0, 0.0, 0.0]), np.full(6, 0.1)
        for env in (ours, theirs):
            env.reset(seed=2)
            env.step(actions)
            assert env.call("set_state", qpos, qvel) == (None, None)
        for _ in range(3):
            got, want = ours.step(actions), theirs.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match=r"^BatchEnv.mujoco resets its envs in the batch, "):
            ours.call("reset", seed=3)
    theirs.close()


RENDER = """
from batchrl.scripts import visualize
visualize.choose_headless_gl()  # Before MuJoCo loads, as the visualize script does.
import gymnasium as gym
import numpy as np
from batchrl.envs import BatchEnv

with BatchEnv.mujoco("HalfCheetah-v5", 2, render_mode="rgb_array") as env:
    try:  # As Gymnasium's OrderEnforcing: frames of the model's initial state, unseeded.
        env.render()
        raise AssertionError("rendered before reset")
    except gym.error.ResetNeeded as error:
        assert str(error) == "HalfCheetah-v5: cannot render before reset: call reset()"
    env.reset(seed=0)
    for _ in range(30):
        env.step(np.stack([np.ones(6, np.float32), -np.ones(6, np.float32)]))
    frames = env.render()
np.save(OUT, np.stack(frames))
"""


def test_renders_each_env_from_its_own_state(tmp_path):
    out = tmp_path / "frames.npy"
    script = RENDER.replace("OUT", repr(str(out)))
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    frames = np.load(out)
    assert frames.shape == (2, 480, 480, 3) and frames[0].std() > 0
    assert not np.array_equal(frames[0], frames[1])  # Two cheetahs in two poses.


def test_the_default_threads_are_the_cores_this_process_may_run_on():
    # MuJoCo's own default (nthread=0) starts one thread per core of the machine.
    with one_core(), BatchEnv.mujoco("Hopper-v5", 4) as env:
        (group,) = env.groups
        assert group.threads == 1 and group._batch.nthread == 1


def test_bad_ids_and_settings_are_named():
    with pytest.raises(ValueError, match=r"does not implement 'CartPole-v1': it implements Half"):
        BatchEnv.mujoco("CartPole-v1", 2)
    for threads in (1.5, "2", 0):
        message = f"threads must be a whole number .*got {re.escape(repr(threads))}"
        with pytest.raises(ValueError, match=message):
            BatchEnv.mujoco("Hopper-v5", 2, threads=threads)
    for num_envs in (2.0, "2", True, 0):
        message = f"num_envs must be a whole number .*got {re.escape(repr(num_envs))}"
        with pytest.raises(ValueError, match=message):
            BatchEnv.mujoco("Hopper-v5", num_envs)
    taken = "it takes xml_file, .*healthy_reward, .*render_mode, .*max_episode_steps"
    with pytest.raises(ValueError, match=f"Hopper-v5 takes no keyword 'healthy_rewards': {taken}"):
        BatchEnv.mujoco("Hopper-v5", 2, healthy_rewards=0.5)
    # Frame lists are filled by Gymnasium's env's step, which the batch never calls: env 0
    # kept its reset's frame, env 1 none.
    for mode in ("rgb_array_list", "human"):
        with pytest.raises(ValueError, match=rf"^BatchEnv.mujoco .*got '{mode}' \(windows"):
            BatchEnv.mujoco("Hopper-v5", 2, render_mode=mode)
    with BatchEnv.mujoco("Hopper-v5", 2) as env:
        assert env.get_attr("frame_skip") == (4, 4)
        with pytest.raises(AttributeError, match="cannot set 'frame_skip' per env"):
            env.set_attr("frame_skip", 3)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_close_ends_the_batch_threads_while_the_env_is_still_held():
    before = _threads()
    env = BatchEnv.mujoco("Ant-v5", 4, threads=3)
    env.reset(seed=0)
    env.step(np.zeros((4, 8), np.float32))
    assert _threads() > before
    env.close()
    assert _threads() == before
    env.close()


def test_a_step_before_reset_and_a_frame_skip_below_one_are_refused():
    # The step ran every env from the model's initial state, without reset noise, alike;
    # frame_skip=-1 was MuJoCo's FatalError at the first step.
    with BatchEnv.mujoco("Hopper-v5", 2) as env:
        with pytest.raises(gym.error.ResetNeeded, match="Hopper-v5: cannot step before reset"):
            env.step(np.zeros((2, 3), np.float32))
        env.reset(seed=0)
        env.step(np.zeros((2, 3), np.float32))
    for skip in (-1, 0, 2.5):  # 0 was Gymnasium's ZeroDivisionError.
        with pytest.raises(ValueError, match=rf"^frame_skip must be a whole .*, got {skip}$"):
            BatchEnv.mujoco("Hopper-v5", 2, frame_skip=skip)
    with pytest.raises(TypeError, match=r"takes a task's id, as 'Hopper-v5', got EnvSpec: give"):
        BatchEnv.mujoco(gym.spec("Hopper-v5"), 2)  # As gym.make takes one.

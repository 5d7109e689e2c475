"""BatchEnv as a Gymnasium VectorEnv: the same results as SyncVectorEnv, step for step."""

import contextlib
import functools
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv, EnvRaisedError
from batchrl.testing import mock

MODES = list(AutoresetMode)


def assert_same_infos(ours, theirs, where):
    assert isinstance(ours, dict)
    assert list(ours) == list(theirs), where  # Keys in Gymnasium's order too.
    for key, expected in theirs.items():
        value = ours[key]
        if isinstance(expected, dict):
            assert_same_infos(value, expected, f"{where}, {key}")
        elif expected.dtype == object:  # final_obs: one array (or None) per env.
            for a, b in zip(value, expected, strict=True):
                assert (a is None) == (b is None), f"{where}, {key}"
                if b is not None:
                    np.testing.assert_array_equal(a, b, err_msg=f"{where}, {key}")
        else:
            assert value.dtype == expected.dtype, f"{where}, {key}"
            np.testing.assert_array_equal(value, expected, err_msg=f"{where}, {key}")


def run_side_by_side(ours, theirs, steps, seed, dtype=None):
    """Steps both with the same random actions; asserts equal results; counts episode ends.

    Actions are drawn in `dtype`, by default the action space's.
    """
    mode = theirs.metadata["autoreset_mode"]
    rng = np.random.default_rng(seed)
    seeds = [seed + 10 * i for i in range(ours.num_envs)]
    got, want = ours.reset(seed=seeds), theirs.reset(seed=seeds)
    np.testing.assert_array_equal(got[0], want[0])
    assert_same_infos(got[1], want[1], "first reset")
    ends = 0
    for t in range(steps):
        low, high = theirs.action_space.low, theirs.action_space.high
        action = rng.uniform(low, high).astype(dtype or theirs.action_space.dtype)
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


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize(("env_id", "steps"), [("Pendulum-v1", 1000), ("Hopper-v5", 1000)])
def test_steps_as_sync_vector_env_for_every_autoreset_mode(mode, env_id, steps):
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 4, autoreset_mode=mode)
    # Two workers of one env each, and two envs stepped in this process.
    with BatchEnv.external(env_id, 4, envs_per_worker=1, local_envs=2, autoreset_mode=mode) as ours:
        ends = run_side_by_side(ours, theirs, steps, seed=7)
    theirs.close()
    assert ends >= 8  # Every mode's episode ends were compared, several per env.


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("env_id", ["Hopper-v5", "Humanoid-v5"])  # Humanoid's infos hold arrays.
def test_steps_as_sync_vector_env_with_every_env_in_a_worker(mode, env_id):
    # The workers' infos, numeric columns, become the vector infos a key at a time.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 4, autoreset_mode=mode)
    with BatchEnv.external(env_id, 4, envs_per_worker=2, autoreset_mode=mode) as ours:
        ends = run_side_by_side(ours, theirs, 120, seed=3)
    theirs.close()
    assert ends >= 8


@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_float64_actions_reach_the_envs_as_sync_vector_env_passes_them(build):
    # They were rounded to the space's float32 on the way: Pendulum's states and returns
    # came out 1e-6 apart from SyncVectorEnv's. Now they cross the worker's pipe as given.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 3)
    if build == "external":
        ours = BatchEnv.external("Pendulum-v1", 3, envs_per_worker=2)
    else:
        ours = BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(3)])
    with ours:
        run_side_by_side(ours, theirs, 300, seed=1, dtype=np.float64)
        run_side_by_side(ours, theirs, 20, seed=2)  # And the space's dtype again.
    theirs.close()


@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_actions_of_another_dtype_are_taken_at_step_async(build):
    # Kept by reference until step_wait, they were read after the caller wrote them again.
    make = functools.partial(mock.ActionEcho, gym.spaces.Box(-9.0, 9.0, (2,), np.float64))
    ours = (
        BatchEnv.external([make] * 2)
        if build == "external"
        else BatchEnv.from_envs([make() for _ in range(2)])
    )
    with ours:
        ours.reset(seed=0)
        actions = np.ones((2, 2), np.float32)
        ours.step_async(actions)
        actions[:] = 7.0
        np.testing.assert_array_equal(ours.step_wait()[0], np.ones((2, 2)))


@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_without_autoreset_an_ended_env_is_refused_a_step_until_reset(build):
    # It stepped on in its ended episode, where SyncVectorEnv and AsyncVectorEnv refuse.
    disabled = AutoresetMode.DISABLED
    make = functools.partial(mock.CountingEnv, duration=2)
    ours = (
        BatchEnv.external([make] * 3, autoreset_mode=disabled)
        if build == "external"
        else BatchEnv.from_envs([make() for _ in range(3)], autoreset_mode=disabled)
    )
    actions = np.zeros((3, 2), np.float32)
    with ours:
        ours.reset(seed=0)
        ours.step(actions)
        *_, terminated, _, _ = ours.step(actions)
        assert terminated.all()
        with pytest.raises(gym.error.ResetNeeded, match=r"^envs \[0, 1, 2\] ended and were"):
            ours.step(actions)
        ours.reset(options={"reset_mask": np.array([True, True, False])})
        with pytest.raises(gym.error.ResetNeeded, match=r"^envs \[2\] ended"):
            ours.step(actions)
        ours.reset_at([2])  # Beneath Gymnasium's API too.
        assert not ours.step(actions)[2].any()


def test_vector_env_attributes_match_sync_vector_env():
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 3)
    with BatchEnv.external("Pendulum-v1", 3) as ours:
        assert isinstance(ours, gym.vector.VectorEnv)
        for name in ("num_envs", "single_observation_space", "single_action_space"):
            assert getattr(ours, name) == getattr(theirs, name), name
        assert ours.observation_space == theirs.observation_space
        assert ours.action_space == theirs.action_space
        assert ours.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert ours.metadata["render_fps"] == theirs.metadata["render_fps"]
        assert ours.spec.id == "Pendulum-v1" and ours.render_mode is None
        assert "Pendulum-v1" in repr(ours) and not ours.closed
    assert ours.closed
    theirs.close()


def test_call_get_attr_set_attr_and_render_reach_every_env():
    with BatchEnv.external(
        lambda: gym.make("Pendulum-v1", render_mode="rgb_array"), 3, envs_per_worker=2
    ) as env:
        assert env.render_mode == "rgb_array"
        assert env.get_attr("max_speed") == (8.0, 8.0, 8.0)  # Found through the wrappers.
        env.set_attr("max_speed", [1.0, 2.0, 3.0])
        assert env.call("max_speed") == (1.0, 2.0, 3.0)  # A value, not callable.
        env.set_attr("max_speed", 4.0)
        assert env.get_attr("max_speed") == (4.0, 4.0, 4.0)
        env.reset(seed=0)
        frames = env.render()
        assert len(frames) == 3 and frames[0].shape == (500, 500, 3) and frames[0].std() > 0
        # A method is called, as SyncVectorEnv's get_attr calls it: it gave the method of a
        # pickled copy, which never reached the env.
        got = env.get_attr("render", indices=[1])[0]
        np.testing.assert_array_equal(got, frames[1])
        with pytest.raises(ValueError, match=r"set_attr needs one value or 3 .*got 2"):
            env.set_attr("max_speed", [1.0, 2.0])


def test_the_envs_of_every_worker_answer_a_call_at_once_and_an_error_leaves_none_pending(
    tmp_path,
):
    # One env a worker, and one in this process: called one after another, none would meet.
    with BatchEnv.external(mock.CountingEnv, 4, envs_per_worker=1, local_envs=1) as env:
        assert env.call("meet", str(tmp_path), 4) == (True,) * 4
        with pytest.raises((AttributeError, EnvRaisedError), match="no_such_attribute"):
            env.get_attr("no_such_attribute")  # In this process, or in a worker.
        assert env.get_attr("duration") == (3,) * 4  # Every worker answered before the raise.
        assert all(map(callable, env.get_attr("meet", call_methods=False)))  # As SB3 reads it.


def test_gymnasium_vector_wrappers_run_over_it():
    def wrapped(env):
        env = gym.wrappers.vector.ClipAction(env)
        env = gym.wrappers.vector.NormalizeObservation(env)
        return gym.wrappers.vector.RecordEpisodeStatistics(env)

    theirs = wrapped(gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2))
    with BatchEnv.external("Pendulum-v1", 2) as env:
        ours = wrapped(env)
        rng = np.random.default_rng(0)
        np.testing.assert_array_equal(ours.reset(seed=0)[0], theirs.reset(seed=0)[0])
        episodes = 0
        for _ in range(450):
            action = rng.uniform(-4, 4, (2, 1)).astype(np.float32)  # Clipped to [-2, 2].
            got, want = ours.step(action), theirs.step(action)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
            if "episode" in want[4]:
                episodes += 1
                np.testing.assert_allclose(got[4]["episode"]["r"], want[4]["episode"]["r"])
                np.testing.assert_array_equal(got[4]["_episode"], want[4]["_episode"])
        assert episodes == 2 and len(ours.return_queue) == 4
    theirs.close()


def test_a_reset_mask_is_taken_from_the_options_as_gymnasium_takes_it():
    # Gymnasium's vector envs pop the mask from the caller's dict; its RecordEpisodeStatistics
    # reads the dict after the reset. Left there, the wrapper cleared the `_episode` mask of
    # the step just returned: a loop reading infos after its resets counted no episode.
    def wrapped(env):
        return gym.wrappers.vector.RecordEpisodeStatistics(env)

    disabled = AutoresetMode.DISABLED
    theirs = wrapped(
        gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, autoreset_mode=disabled)
    )
    with BatchEnv.external("CartPole-v1", 3, autoreset_mode=disabled) as env:
        ours = wrapped(env)
        ours.reset(seed=5), theirs.reset(seed=5)
        rng = np.random.default_rng(0)
        episodes = []
        for _ in range(200):
            action = rng.integers(0, 2, 3)
            got, want = ours.step(action), theirs.step(action)
            done = want[2] | want[3]
            if done.any():
                options = {"reset_mask": done, "other": 1}
                ours.reset(options=options)
                assert options == {"other": 1}
                theirs.reset(options={"reset_mask": done})
            if "episode" in want[4]:
                episodes.append(want[4]["episode"]["r"][want[4]["_episode"]])
                np.testing.assert_array_equal(got[4]["_episode"], want[4]["_episode"])
                np.testing.assert_array_equal(got[4]["episode"]["r"], want[4]["episode"]["r"])
        assert sum(map(len, episodes)) >= 10
    theirs.close()


@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_envs_get_the_reset_options_and_the_one_close_sync_vector_env_gives_them(build, tmp_path):
    # An empty dict reached the envs as None; a worker closed each env twice (on the
    # parent's command, then again as it exited).
    closes = {name: tmp_path / name for name in ("ours", "theirs")}
    makers = {name: functools.partial(mock.WitnessEnv, str(path)) for name, path in closes.items()}
    if build == "external":
        ours = BatchEnv.external([makers["ours"]] * 3, envs_per_worker=2)
    else:
        ours = BatchEnv.from_envs([makers["ours"]() for _ in range(3)])
    disabled = AutoresetMode.DISABLED
    theirs = gym.vector.SyncVectorEnv([makers["theirs"]] * 3, autoreset_mode=disabled)
    with ours:
        for options in (None, {}, {"level": 2}, {"reset_mask": np.array([True, False, True])}):
            got = ours.reset(seed=0, options=None if options is None else dict(options))[1]
            want = theirs.reset(seed=0, options=None if options is None else dict(options))[1]
            np.testing.assert_array_equal(got["options"], want["options"], err_msg=f"{options}")
        with pytest.raises(TypeError, match=r"^options must be a dict or None, got 5$"):
            ours.reset(options=5)  # An AttributeError from inside the reset.
    theirs.close()
    for path in closes.values():
        assert len(path.read_text().split()) == 3, path.name


@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_an_env_whose_close_raises_is_said_and_the_others_close(build, capfd, caplog):
    # Its error was suppressed, in a worker and here alike.
    failing = functools.partial(mock.FailingEnv, where="close")
    if build == "external":
        # Spawned: a fork server started by an earlier test keeps that test's stderr.
        batch = BatchEnv.external([failing] * 2, envs_per_worker=2, context="spawn")
    else:
        batch = BatchEnv.from_envs([failing() for _ in range(2)])
    batch.reset(seed=0)
    batch.close()
    said = capfd.readouterr().err + "\n".join(r.getMessage() for r in caplog.records)
    failed = "raised ValueError in close(): FailingEnv failed on purpose in close"
    assert said.count(f"env 'FailingEnv' {failed}") == 2, said


def test_bad_autoreset_modes_seeds_and_masks_are_named():
    with pytest.raises(ValueError, match="unknown autoreset_mode 'sometimes': use one of NEXT"):
        BatchEnv.external("Pendulum-v1", 2, autoreset_mode="sometimes")
    with BatchEnv.external("Pendulum-v1", 2, autoreset_mode="same_step") as env:
        assert env.autoreset_mode is AutoresetMode.SAME_STEP
        with pytest.raises(ValueError, match="reset got 3 seeds for 2 envs"):
            env.reset(seed=[1, 2, 3])


def test_a_bad_reset_mask_is_refused_as_the_installed_gymnasiums_vector_envs_refuse_it():
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with contextlib.closing(theirs), BatchEnv.external("CartPole-v1", 2) as ours:
        for mask in ([True], [True, False, True], [1, 0], [1.0, 0.0], [False, False]):
            with pytest.raises(Exception) as want:
                theirs.reset(options={"reset_mask": np.array(mask)})
            with pytest.raises(want.type, match=f"^{re.escape(str(want.value))}$") as got:
                ours.reset(options={"reset_mask": np.array(mask)})
            # Code written for either Gymnasium catches it: 1.0-1.3 raised AssertionError.
            assert isinstance(got.value, AssertionError)
            assert isinstance(got.value, ValueError | TypeError)


def test_lazy_infos_nobody_reads_are_never_fetched():
    with BatchEnv.external("HalfCheetah-v5", 2, envs_per_worker=2) as env:
        env.lazy_infos = True
        env.reset(seed=0)
        group = env._groups[0]
        for _ in range(3):
            infos = env.step(np.zeros((2, 6), np.float32))[4]
        owed = group._ledger.held(group._steps)
        assert owed is not None and owed._fetch is not None  # Still in the worker.
        assert infos["_x_position"].all()
        assert owed._fetch is None  # Fetched by that first read.


@pytest.mark.parametrize("local_envs", [0, 2], ids=["in-workers", "here"])
def test_lazy_infos_read_steps_later_hold_their_own_steps_values(local_envs):
    # Humanoid's tendon_length is a view of MuJoCo's data, which the next step rewrites:
    # read after it, its infos once held that step's values, in a worker and here.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("Humanoid-v5")] * 2)
    ours = BatchEnv.external("Humanoid-v5", 2, envs_per_worker=2, local_envs=local_envs)
    with ours, contextlib.closing(theirs):
        ours.lazy_infos = True
        kept, want = [ours.reset(seed=0)[1]], [theirs.reset(seed=0)[1]]
        rng = np.random.default_rng(0)
        for _ in range(3):
            action = rng.uniform(-0.4, 0.4, (2, 17)).astype(np.float32)
            kept.append(ours.step(action)[4])
            want.append(theirs.step(action)[4])
        assert "tendon_length" in want[-1]
        for t, (infos, expected) in enumerate(zip(kept, want, strict=True)):
            assert_same_infos(infos, expected, f"infos of call {t}")


def test_seeds_scalar_actions_and_closed_batches_behave_as_in_gymnasium():
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    with BatchEnv.external("CartPole-v1", 3, envs_per_worker=2, local_envs=1) as ours:
        for env in (ours, theirs):
            env.reset(seed=42)
            env.reset()  # Without a seed: each env keeps its own.
        assert ours.np_random_seed == theirs.np_random_seed == (42, 43, 44)
        assert [g.bit_generator.state for g in ours.np_random] == [
            g.bit_generator.state for g in theirs.np_random
        ]
        with pytest.raises(TypeError, match=r"batch of shape \(3,\), one per env, got the scalar"):
            ours.step(0)
        with pytest.raises(ValueError, match=r"actions of shape \(2,\) do not fit"):
            ours.step(np.array([0, 1]))
    with pytest.raises(gym.error.ClosedEnvironmentError, match="this BatchEnv is closed"):
        ours.reset()
    theirs.close()
    # Closed with an ended episode unreset (DISABLED): step said "reset them first", and
    # reset then said closed.
    with BatchEnv.external("CartPole-v1", 2, autoreset_mode="disabled") as ours:
        ours.reset(seed=0)
        while not any(ours.step(np.array([0, 0]))[2]):  # Pushed one way, the pole falls.
            pass
    for step in (ours.step, ours.step_async):
        with pytest.raises(gym.error.ClosedEnvironmentError, match="this BatchEnv is closed"):
            step(np.array([0, 0]))


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("build", ["external", "from_envs"])
def test_infos_are_plain_dicts_equal_to_sync_vector_envs(mode, build):
    # Gymnasium's data_equivalence asks for the type dict itself, as its vector tests do.
    from gymnasium.utils.env_checker import data_equivalence

    from batchrl.testing import mock

    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    make = functools.partial(mock.SpaceEnv, space, duration=3)
    if build == "external":
        ours = BatchEnv.external([make] * 3, envs_per_worker=2, autoreset_mode=mode)
    else:
        ours = BatchEnv.from_envs([make() for _ in range(3)], autoreset_mode=mode)
    theirs = gym.vector.SyncVectorEnv([make] * 3, autoreset_mode=mode)
    with ours, contextlib.closing(theirs):
        got, want = ours.reset(seed=5), theirs.reset(seed=5)
        assert type(got[1]) is dict and data_equivalence(got[1], want[1])
        actions = np.zeros((3, 2), np.float32)
        for t in range(7):
            got, want = ours.step(actions), theirs.step(actions)
            assert type(got[4]) is dict, f"step {t}"
            assert data_equivalence(got[4], want[4]), f"infos at step {t}: {got[4]} {want[4]}"
            if mode is AutoresetMode.DISABLED and (want[2] | want[3]).any():
                ours.reset(seed=t), theirs.reset(seed=t)


def test_actions_a_cast_would_change_are_refused_as_gymnasium_refuses_them():
    # CartPole's Discrete(2) takes integers: 1.7 and -0.6 once stepped as 1 and 0.
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with contextlib.closing(theirs), BatchEnv.external("CartPole-v1", 2, envs_per_worker=1) as ours:
        theirs.reset(seed=0), ours.reset(seed=0)
        for floats in (np.array([1.7, -0.6]), np.array([1.0, 0.0]), np.array(["1", "0"])):
            with pytest.raises(AssertionError, match="invalid"):
                theirs.step(floats)
            with pytest.raises(TypeError, match=rf"^actions of dtype {floats.dtype} do not fit"):
                ours.step(floats)
        ints = np.array([1, 0], np.int32)  # Integers of any width step, as in Gymnasium.
        np.testing.assert_array_equal(ours.step(ints)[0], theirs.step(ints)[0])
    with BatchEnv.external("Pendulum-v1", 2) as ours:  # A float Box takes integers too.
        ours.reset(seed=0)
        assert ours.step(np.ones((2, 1), np.int64))[1].shape == (2,)


def test_wrappers_wrap_each_env_as_gym_make_vec_wraps_them():
    # gym.make_vec(id, n, wrappers=[...]) was refused: "takes no keyword 'wrappers'".
    wrappers = [
        functools.partial(gym.wrappers.ClipReward, min_reward=-0.5, max_reward=0.0),
        functools.partial(gym.wrappers.TimeLimit, max_episode_steps=7),
    ]
    theirs = gym.make_vec("Pendulum-v1", 3, vectorization_mode="sync", wrappers=wrappers)
    with BatchEnv.external("Pendulum-v1", 3, local_envs=1, wrappers=wrappers) as ours:
        ends = run_side_by_side(ours, theirs, 20, seed=2)
    theirs.close()
    assert ends == 6  # Every env truncated at 7 steps, twice.
    with pytest.raises(TypeError, match=r"^wrappers holds 3: each is a function of an env$"):
        BatchEnv.external("Pendulum-v1", 2, wrappers=[gym.wrappers.ClipReward, 3])

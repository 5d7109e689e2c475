import functools
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

from batchrl.conftest import wait_gone
from batchrl.envs import BatchEnv
from batchrl.envs.host import errors, external, local, polling, process, split
from batchrl.testing import mock


def random_actions(space, batch_size, steps, seed=0):
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, (steps, batch_size))
    return rng.uniform(space.low, space.high, (steps, batch_size, *space.shape)).astype(space.dtype)


def rollout(env, actions, seed):
    """Steps `env` through `actions`, resetting finished envs; returns everything it saw."""
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        seen += [obs, reward, terminated, truncated]
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            seen.append(env.reset_at(done)[0])
    return seen


def plain_step(env, actions):
    """The per-env infos of a step without autoreset, through `step_into`."""
    space = env.single_observation_space
    obs = np.empty((env.num_envs, *space.shape), space.dtype)
    flags = [np.empty(env.num_envs, t) for t in (np.float64, bool, bool)]
    return env.step_into(actions, obs, *flags)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_local_batch_equals_stepping_envs_directly():
    envs = [gym.make("Pendulum-v1") for _ in range(3)]
    direct = [gym.make("Pendulum-v1") for _ in range(3)]
    actions = random_actions(envs[0].action_space, 3, 20)
    with BatchEnv.from_envs(envs) as env:
        obs, _ = env.reset(seed=4)
        for i, d in enumerate(direct):
            np.testing.assert_array_equal(obs[i], d.reset(seed=4 + i)[0])
        for action in actions:
            obs, reward, terminated, truncated, _ = env.step(action)
            for i, d in enumerate(direct):
                d_obs, d_reward, d_terminated, d_truncated, _ = d.step(action[i])
                np.testing.assert_array_equal(obs[i], d_obs)
                assert (reward[i], terminated[i], truncated[i]) == (
                    d_reward,
                    d_terminated,
                    d_truncated,
                )


@pytest.mark.parametrize(
    ("env_id", "steps"), [("Pendulum-v1", 250), ("CartPole-v1", 120), ("HalfCheetah-v5", 40)]
)
@pytest.mark.parametrize(("envs_per_worker", "local_envs"), [(1, 0), (3, 0), (None, 2)])
def test_parallel_equals_blocking_for_the_same_seed(env_id, steps, envs_per_worker, local_envs):
    local = BatchEnv.from_envs([gym.make(env_id) for _ in range(4)])
    actions = random_actions(local.single_action_space, 4, steps)
    expected = rollout(local, actions, seed=3)
    with BatchEnv.external(
        env_id, 4, envs_per_worker=envs_per_worker, local_envs=local_envs
    ) as external:
        assert external.observation_space == local.observation_space
        assert len(external) == 4
        assert_same(rollout(external, actions, seed=3), expected)
    local.close()


def test_workers_that_block_at_once_step_the_same():
    """spin=0: parent and workers sleep in poll instead of polling first."""
    local = BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(4)])
    actions = random_actions(local.single_action_space, 4, 60)
    expected = rollout(local, actions, seed=5)
    with BatchEnv.external("Pendulum-v1", 4, envs_per_worker=2, spin=0.0) as external:
        assert_same(rollout(external, actions, seed=5), expected)
    local.close()


def test_infos_equal_the_envs_own_infos():
    direct = gym.make("HalfCheetah-v5")
    direct.reset(seed=0)
    action = np.full(6, 0.5, np.float32)
    expected = direct.step(action)[4]
    with BatchEnv.external("HalfCheetah-v5", 2, envs_per_worker=2) as env:
        env.reset(seed=0)
        infos = env.step(np.stack([action, action]))[4]
        assert infos.keys() == {*expected, *(f"_{key}" for key in expected)}
        for key, value in expected.items():
            assert infos[key][0] == value and infos[key].dtype == np.asarray(value).dtype
            assert infos[f"_{key}"].tolist() == [True, True]
        per_env = plain_step(env, np.stack([action, action]))
        for key, value in expected.items():
            assert type(per_env[0][key]) is type(value)


def test_reset_by_index_resets_only_those_envs():
    with BatchEnv.external(functools.partial(mock.CountingEnv, duration=10), 4) as env:
        env.reset(seed=0)
        env.step(np.zeros((4, 2), np.float32))
        obs, infos = env.reset_at([3, 1], seed=100)
        assert [info["seed"] for info in infos] == [103, 101]
        np.testing.assert_array_equal(obs[:, 0], [0, 0])
        obs = env.step(np.zeros((4, 2), np.float32))[0]
        np.testing.assert_array_equal(obs[:, 0], [2, 1, 2, 1])


def test_exact_episode_bookkeeping_with_durations_one_to_four():
    constructors = [functools.partial(mock.CountingEnv, duration=d) for d in (1, 2, 3, 4)]
    with BatchEnv.external(constructors, envs_per_worker=2) as env:
        env.reset(seed=0)
        dones = []
        for _ in range(12):
            _, _, terminated, truncated, _ = env.step(np.zeros((4, 2), np.float32))
            assert not truncated.any()
            dones.append(terminated.copy())
            env.reset_at(np.flatnonzero(terminated))
        dones = np.array(dones)
        for i, duration in enumerate((1, 2, 3, 4)):
            expected = [(t + 1) % duration == 0 for t in range(12)]
            np.testing.assert_array_equal(dones[:, i], expected)


def test_discrete_actions():
    with BatchEnv.external(
        functools.partial(mock.CountingEnv, discrete=True, duration=5), 3
    ) as env:
        env.reset(seed=0)
        reward = env.step(np.array([0, 1, 2]))[1]
        np.testing.assert_array_equal(reward, [1.0, 2.0, 3.0])


def test_mismatched_spaces_are_refused():
    envs = [gym.make("Pendulum-v1"), gym.make("MountainCarContinuous-v0")]
    with pytest.raises(ValueError, match=r"must share spaces.*'Pendulum-v1'.*'MountainCar"):
        BatchEnv.from_envs(envs)
    # Within one worker too, the same one-line error as the batch's own check.
    with pytest.raises(errors.SpaceMismatchError, match=r"^envs in one batch must share spaces"):
        BatchEnv.external(
            [lambda: gym.make("Pendulum-v1"), lambda: gym.make("MountainCarContinuous-v0")],
            envs_per_worker=2,
        )
    with pytest.raises(ValueError, match="must share spaces"):
        BatchEnv.external(
            [lambda: gym.make("Pendulum-v1"), lambda: gym.make("MountainCarContinuous-v0")],
            envs_per_worker=1,
        )


def test_batch_env_takes_started_groups_in_order_and_refuses_env_objects():
    workers = process.ProcessGroup([lambda: gym.make("Pendulum-v1")] * 2, first_index=0)
    here = local.LocalGroup([gym.make("Pendulum-v1")])
    with (
        BatchEnv([workers, here]) as env,
        BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(3)]) as expected,
    ):
        np.testing.assert_array_equal(env.reset(seed=5)[0], expected.reset(seed=5)[0])
        assert env.num_envs == 3
    started = process.ProcessGroup([lambda: gym.make("Pendulum-v1")], first_index=0)
    pid = started.pid
    with pytest.raises(TypeError, match=r"got <TimeLimit.*BatchEnv.from_envs\(envs\)"):
        BatchEnv([started, gym.make("Pendulum-v1")])
    assert pid is not None and not wait_gone(
        [pid]
    )  # The started group closed with the refused batch.
    with pytest.raises(ValueError, match="at least one group"):
        BatchEnv([])


def test_bad_actions_and_indices_get_clear_errors():
    with BatchEnv.external("Pendulum-v1", 2) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"actions of shape \(3, 1\).*expected \(2, 1\)"):
            env.step(np.zeros((3, 1), np.float32))
        with pytest.raises(IndexError, match="env index 5 is out of range"):
            env.reset_at([5])
        # A done mask read as numbers named envs 0 and 1; floats were cut to whole numbers.
        with pytest.raises(TypeError, match=r"^env indices are env numbers, got a mask of bo"):
            env.set_attr("max_speed", 1.0, indices=np.array([False, True]))
        with pytest.raises(TypeError, match=r"^env indices must be whole numbers, got \[0.9\]$"):
            env.reset_at([0.9])
        assert env.get_attr("max_speed", indices=[]) == ()
        assert env.get_attr("max_speed") == (8.0, 8.0)  # No env was set.
        env.step(np.zeros((2, 1), np.float32))  # Still usable after refused input.


def test_an_action_one_env_cannot_take_is_refused_before_any_env_steps():
    """No worker is left stepping, and the infos read later are still each step's."""
    actions = random_actions(gym.make("HalfCheetah-v5").action_space, 2, 3)
    bad = np.array([[0.0] * 6, ["x"] * 6], object)  # Env 0's action is fine, env 1's is not.
    with (
        BatchEnv.external("HalfCheetah-v5", 2, envs_per_worker=1) as env,
        BatchEnv.external("HalfCheetah-v5", 2, envs_per_worker=1) as twin,
    ):
        env.lazy_infos = twin.lazy_infos = True
        env.reset(seed=3)
        twin.reset(seed=3)
        with pytest.raises(ValueError, match="could not convert string to float: 'x'"):
            env.step(bad)
        got = [env.step(action) for action in actions]  # Infos read after all steps.
        want = [twin.step(action) for action in actions]
        assert data_equivalence(got, want)


def test_a_crash_in_one_worker_is_reported_and_close_ends_all_workers():
    constructors = [functools.partial(mock.CountingEnv, obs_size=3)] * 3 + [
        functools.partial(mock.FailingEnv, how="sigkill", at=2, obs_size=3)
    ]
    env = BatchEnv.external(constructors, envs_per_worker=2)
    pids = [g.pid for g in env._groups]
    env.reset(seed=0)
    env.step(np.zeros((4, 2), np.float32))
    with pytest.raises(errors.EnvCrashedError, match=r"envs 2-3.*died \(signal SIGKILL\)"):
        env.step(np.zeros((4, 2), np.float32))
    env.close()
    env.close()
    assert not wait_gone(pids)


def second_worker_exits_at_step_two() -> list:
    """Constructors of 4 envs for 2 per worker: the second worker's envs exit at step 2."""
    return [lambda: mock.CountingEnv(duration=100)] * 2 + [
        functools.partial(mock.FailingEnv, how="exit", at=2, duration=100)
    ] * 2


def test_restart_in_a_batch_truncates_only_that_workers_envs():
    constructors = second_worker_exits_at_step_two()
    with BatchEnv.external(constructors, envs_per_worker=2, restart=True) as env:
        env.reset(seed=0)
        env.step(np.zeros((4, 2), np.float32))
        _, reward, terminated, truncated, infos = env.step(np.zeros((4, 2), np.float32))
        np.testing.assert_array_equal(truncated, [False, False, True, True])
        assert not terminated.any() and env.restarts == 1
        assert infos["_restarted"].tolist() == [False, False, True, True]
        assert infos["restarted"][2]
        np.testing.assert_array_equal(reward, [2.0, 2.0, 0.0, 0.0])


class StepInfo(gym.Wrapper):
    """Reports its step count in every step's info."""

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, {"steps": self.env.unwrapped.steps}


def test_unread_infos_of_a_worker_that_died_are_named_as_lost():
    counting = [lambda: StepInfo(mock.CountingEnv(duration=100))] * 2
    failing = [lambda: StepInfo(mock.FailingEnv(how="exit", at=2, duration=100))] * 2
    with BatchEnv.external(counting + failing, envs_per_worker=2, restart=True) as env:
        env.reset(seed=0)
        before = plain_step(env, np.zeros((4, 2), np.float32))  # Not read before the crash.
        env.step(np.zeros((4, 2), np.float32))
        assert env.restarts == 1
        assert before[1] == {"steps": 1}  # The other worker's infos are still there.
        with pytest.raises(errors.EnvError, match=r"infos of step 1 of .*envs 2-3.* were lost"):
            before[2]


class SpyConnection:
    """A worker's command pipe that notes the command of each message sent on it."""

    def __init__(self, conn):
        self.conn, self.sent = conn, []

    def send(self, message):
        self.sent.append(message[0])
        self.conn.send(message)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_plain_infos_come_with_the_workers_answer_and_lazy_ones_when_read():
    constructors = [lambda: StepInfo(mock.CountingEnv(duration=100))] * 4
    with BatchEnv.external(constructors, envs_per_worker=2) as env:
        spies = [SpyConnection(group._conn) for group in env._groups]
        for group, spy in zip(env._groups, spies, strict=True):
            group._conn = spy
        env.reset(seed=0)
        for t in (1, 2):
            infos = env.step(np.zeros((4, 2), np.float32))[4]
            np.testing.assert_array_equal(infos["steps"], [t] * 4)
        assert [spy.sent.count("infos") for spy in spies] == [0, 0]  # None asked for.
        env.lazy_infos = True
        infos = env.step(np.zeros((4, 2), np.float32))[4]
        assert [spy.sent.count("infos") for spy in spies] == [0, 0]  # Kept in the workers.
        np.testing.assert_array_equal(infos["steps"], [3] * 4)
        assert [spy.sent.count("infos") for spy in spies] == [1, 1]


def test_a_step_whose_infos_are_all_empty_fetches_nothing():
    # The worker's answer says so: nothing to lose with it, nothing to ask it for.
    with BatchEnv.external(
        second_worker_exits_at_step_two(), envs_per_worker=2, restart=True
    ) as env:
        env.reset(seed=0)
        before = plain_step(env, np.zeros((4, 2), np.float32))
        env.step(np.zeros((4, 2), np.float32))
        assert env.restarts == 1
        assert list(before) == [{}] * 4


def test_external_process_instances_can_be_batched():
    envs = [external.ExternalProcess(lambda: gym.make("Pendulum-v1")) for _ in range(2)]
    with BatchEnv.from_envs([*envs, gym.make("Pendulum-v1")]) as env:
        obs, _ = env.reset(seed=0)
        singles = [gym.make("Pendulum-v1") for _ in range(3)]
        for i, single in enumerate(singles):
            np.testing.assert_array_equal(obs[i], single.reset(seed=i)[0])
        action = np.array([[0.5], [-1.0], [2.0]], np.float32)
        obs, reward, *_ = env.step(action)
        for i, single in enumerate(singles):
            want = single.step(action[i])
            np.testing.assert_array_equal(obs[i], want[0])
            assert reward[i] == want[1]


def test_external_processes_batched_are_named_and_reseeded_by_their_place():
    def crashes_at_step_two():
        return mock.FailingEnv(where="step", how="sigkill", at=2)

    envs = [external.ExternalProcess(crashes_at_step_two, restart=True) for _ in range(3)]
    with BatchEnv.from_envs([mock.CountingEnv(), *envs]) as env:
        env.reset()  # Unseeded: a restart's seeds are still distinct.
        env.step(np.zeros((4, 2), np.float32))
        env.step(np.zeros((4, 2), np.float32))  # Every worker dies and is replaced.
        assert env.restarts == 3
        seeds = env.get_attr("np_random_seed")[1:]
        assert len(set(seeds)) == 3, seeds
    lone = external.ExternalProcess(crashes_at_step_two)
    with BatchEnv.from_envs([mock.CountingEnv(), lone]) as env:
        env.reset(seed=0)
        env.step(np.zeros((2, 2), np.float32))
        with pytest.raises(errors.EnvCrashedError, match=r"\(env 1, worker pid"):
            env.step(np.zeros((2, 2), np.float32))


def _rescaled_pendulum():
    return gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), min_action=-1.0, max_action=1.0)


def test_wrapped_envs_in_workers():
    with BatchEnv.external(_rescaled_pendulum, 2) as env:
        np.testing.assert_array_equal(env.single_action_space.high, [1.0])
        assert env.is_wrapped(gym.wrappers.RescaleAction) == (True, True)
        env.reset(seed=0)
        reward = env.step(np.ones((2, 1), np.float32))[1]
        direct = gym.make("Pendulum-v1")
        direct.reset(seed=0)
        assert reward[0] == pytest.approx(direct.step(np.array([2.0], np.float32))[1], rel=1e-6)


class _WhereEnv(mock.CountingEnv):
    def pid(self) -> int:
        """The process the env runs in."""
        return os.getpid()


def test_local_envs_step_in_this_process_beside_the_workers():
    with BatchEnv.external(_WhereEnv, 5, local_envs=2, envs_per_worker=2) as env:
        pids = env.call("pid")
        assert pids[3:] == (os.getpid(),) * 2  # The last two, in this process.
        assert pids[0] == pids[1] and len({pids[0], pids[2], os.getpid()}) == 3  # Two workers.
        _, infos = env.reset(seed=10)
        assert infos["seed"].tolist() == [10, 11, 12, 13, 14]
        np.testing.assert_array_equal(env.step(np.zeros((5, 2), np.float32))[0][:, 0], [1] * 5)
    with BatchEnv.external(_WhereEnv, 3, local_envs="auto") as env:
        here = sum(pid == os.getpid() for pid in env.call("pid"))
        assert here == split.default_local_envs(3)


@pytest.mark.parametrize("bad", [-1, 4, "half", True])
def test_bad_local_envs_are_named(bad):
    with pytest.raises(ValueError, match=f"local_envs must be .*got '?{bad}"):
        BatchEnv.external(mock.CountingEnv, 3, local_envs=bad)


class _KeepsActions(mock.CountingEnv):
    def __init__(self):
        super().__init__(duration=10)
        self.actions = []

    def step(self, action):
        self.actions.append(action)
        return super().step(action)


def test_an_env_may_keep_the_actions_it_was_given():
    kept = _KeepsActions()
    with BatchEnv.from_envs([kept]) as env:
        env.reset(seed=0)
        env.step(np.full((1, 2), 0.5, np.float32))
        env.step(np.full((1, 2), -0.5, np.float32))
    np.testing.assert_array_equal(kept.actions, [[0.5, 0.5], [-0.5, -0.5]])


class _WrongShape(mock.CountingEnv):
    def step(self, action):
        return np.zeros(5, np.float32), *super().step(action)[1:]


def test_an_observation_of_the_wrong_shape_is_named():
    with BatchEnv.from_envs([mock.CountingEnv(), _WrongShape()]) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"observation of shape \(5,\).*has shape \(3,\)"):
            env.step(np.zeros((2, 2), np.float32))


def test_step_into_writes_what_step_returns_into_the_callers_arrays():
    actions = random_actions(gym.make("HalfCheetah-v5").action_space, 3, 5)
    with (
        BatchEnv.external("HalfCheetah-v5", 3, local_envs=1) as a,
        BatchEnv.external("HalfCheetah-v5", 3, local_envs=1) as b,
    ):
        a.reset(seed=3)
        b.reset(seed=3)
        obs = np.zeros((3, 17), np.float32)
        reward = np.zeros(3, np.float32)
        terminated, truncated = np.ones(3, bool), np.ones(3, bool)
        for action in actions:
            expected = a.step(action)
            infos = b.step_into(action, obs, reward, terminated, truncated)
            np.testing.assert_allclose(obs, expected[0], rtol=1e-6)
            np.testing.assert_allclose(reward, expected[1], rtol=1e-6)
            np.testing.assert_array_equal(terminated, expected[2])
            np.testing.assert_array_equal(truncated, expected[3])
            for key, value in expected[4].items():
                if not key.startswith("_"):
                    np.testing.assert_array_equal(value, [info[key] for info in infos])
        with pytest.raises(ValueError, match=r"actions of shape \(2, 6\) do not fit"):
            b.step_into(actions[0, :2], obs, reward, terminated, truncated)


@pytest.mark.parametrize("local_envs", [0, 1])
def test_infos_read_late_or_after_close_are_each_steps_own(local_envs):
    """Infos are decoded on first read: what is read later is still that step's."""
    actions = random_actions(gym.make("HalfCheetah-v5").action_space, 3, 6)
    direct = [gym.make("HalfCheetah-v5") for _ in range(3)]
    for i, d in enumerate(direct):
        d.reset(seed=11 + i)
    expected = [[d.step(a)[4] for d, a in zip(direct, action, strict=True)] for action in actions]
    with BatchEnv.external("HalfCheetah-v5", 3, local_envs=local_envs) as env:
        env.reset(seed=11)
        kept = [plain_step(env, action) for action in actions]  # Read none of them yet.
        assert list(kept[2]) == expected[2]  # One read between steps.
        assert env.get_attr("spec")[0].id == "HalfCheetah-v5"  # A command while infos are owed.
        kept.append(plain_step(env, actions[0]))
    assert [list(infos) for infos in kept[:-1]] == expected  # Last one read after close.
    assert all(info.keys() == expected[0][0].keys() for info in kept[-1])


def test_an_info_that_cannot_cross_processes_is_named():
    def constructor():
        class LambdaInfo(gym.Wrapper):
            def step(self, action):
                obs, reward, terminated, truncated, info = self.env.step(action)
                return obs, reward, terminated, truncated, {**info, "bad": lambda: None}

        return LambdaInfo(mock.CountingEnv())

    with BatchEnv.external(constructor, 2) as env:
        env.reset(seed=0)
        # Plain infos are fetched at each step: the step says it.
        # Python 3.13's own words name no pickle ("Can't get local object"): the error does.
        said = r"(?s)info 'bad' does not pickle, so it cannot reach the main process.*during infos"
        with pytest.raises(errors.EnvRaisedError, match=said):
            env.step(np.zeros((2, 2), np.float32))
        env.lazy_infos = True
        infos = env.step(np.zeros((2, 2), np.float32))[4]
        # Lazy infos stay in the worker until read: the error comes when they are.
        with pytest.raises(errors.EnvRaisedError, match=said):
            infos["bad"]
        with pytest.raises(errors.EnvRaisedError, match=said):
            infos.keys()  # Each read says it again.
        env.step(np.zeros((2, 2), np.float32))  # The batch goes on.


def test_a_reset_info_that_cannot_cross_processes_is_named():
    def constructor():
        class LambdaInfo(gym.Wrapper):
            def reset(self, **kwargs):
                obs, info = self.env.reset(**kwargs)
                return obs, {**info, "bad": lambda: None}

        return LambdaInfo(mock.CountingEnv())

    with BatchEnv.external(constructor, 2) as env:
        said = r"(?s)info 'bad' does not pickle, so it cannot reach the main process.*during reset"
        with pytest.raises(errors.EnvRaisedError, match=said):
            env.reset(seed=0)


@pytest.mark.parametrize("where", ["step", "reset"])
def test_workers_that_all_hang_time_out_together_not_one_after_another(monkeypatch, where):
    # The batch sends each worker its call before it waits for any, so every worker's
    # wait ends at one deadline: four hung workers hold it one timeout, not four.
    hang = functools.partial(mock.FailingEnv, where=where, how="hang", at=2)
    with BatchEnv.external([hang] * 4, envs_per_worker=1) as env:
        env.reset(seed=0)
        env.step(np.zeros((4, 2), np.float32))
        pids = [g.pid for g in env.groups]
        for g in env.groups:  # Short only now: a loaded machine's slow start is no hang.
            g.timeout = 0.5
        waits = []

        def poll(poller, timeout=None):
            waits.append(timeout)
            return poll_before(poller, timeout)

        poll_before = polling.Poller.poll
        monkeypatch.setattr(polling.Poller, "poll", poll)
        with pytest.raises(errors.EnvTimeoutError, match=f"did not answer {where} within 0.5 s"):
            if where == "step":
                env.step(np.zeros((4, 2), np.float32))
            else:
                env.reset(seed=1)
        # The first waits what is left of its timeout; the others, sent before it ended,
        # what is left after it: far under a timeout of their own (each 0.5 before).
        assert 0 < waits[0] <= 0.5
        assert all(wait < 0.25 for wait in waits[1:4]), waits
        assert not wait_gone(pids)


class _ArrayReward(mock.CountingEnv):
    """Returns its reward as an array of one, which Gymnasium's vector envs refuse too."""

    def step(self, action):
        obs, reward, *rest = super().step(action)
        return obs, np.array([reward]), *rest


class _ArrayTerminated(mock.CountingEnv):
    """Returns terminated as an array of one, as a comparison of a state of shape (1,) gives."""

    def step(self, action):
        obs, reward, terminated, *rest = super().step(action)
        return obs, reward, np.array([terminated]), *rest


class _NoneReward(mock.CountingEnv):
    """Returns a reward of None, which numpy wrote as NaN: training then blamed its normaliser."""

    def step(self, action):
        obs, _, *rest = super().step(action)
        return obs, None, *rest


@pytest.mark.parametrize("workers", [True, False], ids=["workers", "local"])
def test_a_reward_of_none_is_named(workers):
    envs = [_NoneReward, _NoneReward]
    build = BatchEnv.external(envs) if workers else BatchEnv.from_envs([e() for e in envs])
    with build as batch:
        batch.reset(seed=0)
        message = "env '_NoneReward' returned a reward of None, but a reward is one number"
        with pytest.raises(errors.EnvRaisedError if workers else ValueError, match=message):
            batch.step(np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("workers", [True, False], ids=["workers", "local"])
@pytest.mark.parametrize(
    ("env", "field"), [(_ArrayReward, "reward"), (_ArrayTerminated, "terminated")]
)
def test_a_reward_or_flag_that_is_not_one_value_is_named(workers, env, field):
    # A terminated of shape (1,) failed inside the autoreset's logical_or, in numpy's words.
    envs = [env, env]
    build = BatchEnv.external(envs) if workers else BatchEnv.from_envs([e() for e in envs])
    with build as batch:
        batch.reset(seed=0)
        message = (
            rf"env '{env.__name__}' returned a {field} of shape \(1,\) \(ndarray\), but a {field}"
        )
        with pytest.raises(errors.EnvRaisedError if workers else ValueError, match=message):
            batch.step(np.zeros((2, 2), np.float32))

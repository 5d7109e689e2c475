"""AsyncVectorEnv's split calls on a BatchEnv: the same results as `step`, Gymnasium's errors."""

import functools
import multiprocessing
import re
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv
from batchrl.envs.host import spaces_test
from batchrl.testing import mock


def test_the_halves_of_a_step_and_a_reset_give_sync_vector_env_results():
    makers = spaces_test.constructors(spaces_test.NESTED)
    theirs = gym.vector.SyncVectorEnv(makers)
    with spaces_test.workers_and_local(makers, AutoresetMode.NEXT_STEP) as ours:
        ours.reset_async(seed=3)
        spaces_test.assert_equivalent(ours.reset_wait()[0], theirs.reset(seed=3)[0], "reset")
        theirs.action_space.seed(0)
        for t in range(8):
            action = theirs.action_space.sample()
            ours.step_async(action)
            want = theirs.step(action)  # Computed while our workers step.
            for a, b in zip(ours.step_wait(), want, strict=True):
                spaces_test.assert_equivalent(a, b, f"step {t}")
        mask = np.array([True, False, True, False])
        ours.reset_async(seed=9, options={"reset_mask": mask})
        got = ours.reset_wait()
        want = theirs.reset(seed=9, options={"reset_mask": mask})
        spaces_test.assert_equivalent(got[0], want[0], "masked reset")
    theirs.close()


def test_calls_out_of_order_raise_gymnasiums_errors_with_async_vector_envs_messages():
    with BatchEnv.external("CartPole-v1", 2) as env:
        message = "Calling `step_wait` without any prior call to `step_async`."
        with pytest.raises(NoAsyncCallError, match=re.escape(message)):
            env.step_wait()
        env.reset_async(seed=0)
        message = "Calling `step_async` while waiting for a pending call to `reset` to complete"
        with pytest.raises(AlreadyPendingCallError, match=re.escape(message)):
            env.step_async(np.zeros(2, np.int64))
        env.reset_wait()
        env.step_async(np.zeros(2, np.int64))
        message = "Calling `reset_async` while waiting for a pending call to `step` to complete"
        with pytest.raises(AlreadyPendingCallError, match=re.escape(message)):
            env.reset_async()
        with pytest.raises(AlreadyPendingCallError, match="`step_into` while waiting"):
            env.step_into(np.zeros(2, np.int64), np.empty((2, 4), np.float32), *[None] * 3)
        with pytest.raises(ValueError, match=r"^step_wait's timeout must be seconds, at least"):
            env.step_wait(timeout=-1)
        assert env.step_wait(timeout=30)[0].shape == (2, 4)  # The step in flight, collected.


def test_a_wait_past_its_timeout_raises_as_async_vector_envs_and_keeps_the_call_in_flight(
    tmp_path,
):
    # AsyncVectorEnv forgets the call: the held env's late answer is read as the next step's.
    gate = tmp_path / "open"
    envs = [mock.CountingEnv, functools.partial(mock.CountingEnv, step_gate=str(gate))]
    with BatchEnv.external([functools.partial(make, 100) for make in envs]) as env:
        env.reset(seed=0)
        env.step_async(np.zeros((2, 2), np.float32))
        message = "The call to `step_wait` has timed out after 0.05 second(s)."
        with pytest.raises(multiprocessing.TimeoutError, match=re.escape(message)):
            env.step_wait(timeout=0.05)  # The second env's step waits for its gate.
        with pytest.raises(AlreadyPendingCallError, match="`step_async` while waiting"):
            env.step_async(np.zeros((2, 2), np.float32))
        gate.touch()
        assert env.step_wait()[0][:, 0].tolist() == [1, 1]  # The step that timed out.
        env.step_async(np.zeros((2, 2), np.float32))
        assert env.step_wait(timeout=30)[0][:, 0].tolist() == [2, 2]
        env.call_async("get_wrapper_attr", "duration")
        with pytest.raises(
            ValueError, match=r"^call_wait takes no timeout \(got 1\): its calls wait"
        ):
            env.call_wait(timeout=1)
        assert env.call_wait() == (100, 100)  # Still asked for.


def test_a_split_call_gives_async_vector_envs_results_and_blocks_other_calls_as_it_does():
    # Its default fork would copy this process's JAX threads' locks: a fresh server forks.
    theirs = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, context="forkserver")
    try:
        split_calls_as_async_vector_env(theirs)
    finally:
        theirs.close()


def split_calls_as_async_vector_env(theirs: gym.vector.AsyncVectorEnv) -> None:
    with BatchEnv.external("CartPole-v1", 3) as ours:
        for env in (ours, theirs):
            env.reset(seed=3)
            env.call_async("get_wrapper_attr", "np_random_seed")
        assert ours.call_wait() == theirs.call_wait() == (3, 4, 5)
        for env in (ours, theirs):  # A call asked for, or a step in flight, blocks the others.
            env.call_async("get_wrapper_attr", "spec")
            with pytest.raises(AlreadyPendingCallError, match=r"`step_async` while .* `call` to"):
                env.step_async(np.zeros(3, np.int64))
            assert [spec.id for spec in env.call_wait()] == ["CartPole-v1"] * 3
            env.step_async(np.zeros(3, np.int64))
            for blocked, message in (
                (lambda env=env: env.call("render"), "`call_async` while waiting for a pending"),
                (lambda env=env: env.get_attr("spec"), "`call_async` while waiting for a pending"),
                (lambda env=env: env.set_attr("x", 1), "`set_attr` while waiting for a pending"),
            ):
                with pytest.raises(AlreadyPendingCallError, match=message):
                    blocked()
            env.step_wait()
        message = "Calling `call_wait` without any prior call to `call_async`."
        with pytest.raises(NoAsyncCallError, match=re.escape(message)):
            ours.call_wait()


def test_call_async_sets_every_workers_env_calling_before_call_wait(tmp_path):
    with BatchEnv.external(mock.CountingEnv, 3, envs_per_worker=1) as env:
        env.call_async("meet", str(tmp_path), 3)
        # Each env marks a file as its call begins: all three, before call_wait is called.
        # Were the calls made in call_wait, this would wait until pytest's timeout.
        while len(list(tmp_path.iterdir())) < 3:
            time.sleep(0.01)
        assert env.call_wait() == (True, True, True)


@pytest.mark.parametrize("call", ["step", "reset", "call"])
def test_closing_with_a_call_in_flight_warns_and_leaves_no_worker(call):
    env = BatchEnv.external("CartPole-v1", 2)
    env.reset(seed=0)
    if call == "step":
        env.step_async(np.zeros(2, np.int64))
    elif call == "reset":
        env.reset_async()
    else:
        env.call_async("render")
    message = f"Calling `close` while waiting for a pending call to `{call}` to complete."
    with pytest.warns(UserWarning, match=re.escape(message)):
        env.close()
    assert env.closed  # The conftest checks that no worker outlives the test.


@pytest.mark.parametrize("how", [{"terminate": True}, {"timeout": 0.2}])
def test_close_with_terminate_or_a_timeout_ends_a_worker_whose_step_never_ends(how):
    # As AsyncVectorEnv's close(terminate=True) and close(timeout=...): the step is dropped.
    endless = [functools.partial(mock.CountingEnv, 100, step_seconds=s) for s in (0.0, 3600.0)]
    env = BatchEnv.external(endless)
    env.reset(seed=0)
    env.step_async(np.zeros((2, 2), np.float32))
    message = "Calling `close` while waiting for a pending call to `step` to complete."
    with pytest.warns(UserWarning, match=re.escape(message)):
        env.close(**how)
    assert env.closed  # The conftest checks that no worker outlives the test.

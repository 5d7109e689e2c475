"""AsyncVectorEnv's split calls on a BatchEnv: the same results as `step`, Gymnasium's errors."""

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv
from batchrl.envs.host import spaces_test


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
        with pytest.raises(ValueError, match=r"^step_wait takes no timeout \(got 0.1\)"):
            env.step_wait(timeout=0.1)
        assert env.step_wait()[0].shape == (2, 4)  # The step in flight, still collected.


@pytest.mark.parametrize("call", ["step", "reset"])
def test_closing_with_a_call_in_flight_warns_and_leaves_no_worker(call):
    env = BatchEnv.external("CartPole-v1", 2)
    env.reset(seed=0)
    if call == "step":
        env.step_async(np.zeros(2, np.int64))
    else:
        env.reset_async()
    message = f"Calling `close` while waiting for a pending call to `{call}` to complete."
    with pytest.warns(UserWarning, match=re.escape(message)):
        env.close()
    assert env.closed  # The conftest checks that no worker outlives the test.

import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import autoreset

ENDED = np.array([True, False, False, True])  # Env 0 terminated, env 3 truncated.
TERMINATED = np.array([True, False, False, False])
TRUNCATED = np.array([False, False, False, True])


def test_next_step_resets_the_envs_that_ended_at_the_following_step_only():
    envs = autoreset.Autoreset(4)
    assert envs.due(AutoresetMode.NEXT_STEP) is None
    assert list(envs.stepped(AutoresetMode.NEXT_STEP, TERMINATED, TRUNCATED)) == []
    np.testing.assert_array_equal(envs.due(AutoresetMode.NEXT_STEP), ENDED)
    # The reset envs report neither at that step, so none is due after it.
    envs.stepped(AutoresetMode.NEXT_STEP, np.zeros(4, bool), np.zeros(4, bool))
    assert envs.due(AutoresetMode.NEXT_STEP) is None


def test_an_env_reset_by_the_caller_is_not_due():
    envs = autoreset.Autoreset(4)
    envs.stepped(AutoresetMode.NEXT_STEP, TERMINATED, TRUNCATED)
    envs.reset([0])
    np.testing.assert_array_equal(envs.due(AutoresetMode.NEXT_STEP), [False, False, False, True])
    envs.reset(np.array([3]))
    assert envs.due(AutoresetMode.NEXT_STEP) is None


def test_same_step_resets_at_once_and_disabled_never():
    envs = autoreset.Autoreset(4)
    assert list(envs.stepped(AutoresetMode.SAME_STEP, TERMINATED, TRUNCATED)) == [0, 3]
    assert envs.due(AutoresetMode.NEXT_STEP) is None
    envs.stepped(AutoresetMode.NEXT_STEP, TERMINATED, TRUNCATED)
    assert list(envs.stepped(AutoresetMode.DISABLED, TERMINATED, TRUNCATED)) == []
    assert envs.due(AutoresetMode.NEXT_STEP) is None  # A step of another mode clears what was due.
    assert envs.due(AutoresetMode.SAME_STEP) is None


def test_a_same_step_info_holds_the_final_obs_and_info_beside_the_resets():
    info = autoreset.final(np.ones(2), {"score": 3}, {"seed_info": 1})
    assert list(info) == ["final_obs", "final_info", "seed_info"]
    assert info["final_info"] == {"score": 3} and info["seed_info"] == 1

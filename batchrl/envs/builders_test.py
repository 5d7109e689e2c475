"""BatchEnv's builders: what `from_envs` cannot batch is named in one line."""

import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs import BatchEnv


def test_from_envs_names_a_constructor_or_an_id_in_place_of_an_env():
    # SyncVectorEnv takes constructors; from_envs takes the envs they build.
    envs = [gym.make("CartPole-v1"), lambda: gym.make("CartPole-v1")]
    with pytest.raises(
        TypeError, match=r"got the constructor .*<lambda> in place 1: build envs from constructors"
    ):
        BatchEnv.from_envs(envs)
    with pytest.raises(
        TypeError, match=r"\(gym.Env or ExternalProcess\), got 'CartPole-v1' in place 0$"
    ):
        BatchEnv.from_envs(["CartPole-v1"])
    with BatchEnv.from_envs(envs[:1]) as env:  # Env objects batch as before.
        assert env.reset(seed=0)[0].shape == (1, 4)


def test_keywords_for_a_gymnasium_id_go_to_gym_make_as_make_vec_passes_them():
    with BatchEnv.external(
        "CartPole-v1", 2, render_mode="rgb_array", sutton_barto_reward=True
    ) as envs:
        envs.reset(seed=0)
        assert envs.get_attr("render_mode") == ("rgb_array", "rgb_array")
        frames = envs.render()
        assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
        _, reward, *_ = envs.step(np.ones(2, np.int64))
        np.testing.assert_array_equal(reward, [0.0, 0.0])  # Sutton and Barto's: 0 until it falls.
    with BatchEnv.external("CartPole-v1", 2, max_episode_steps=3) as envs:  # gym.make's own.
        envs.reset(seed=0)
        for _ in range(3):
            *_, truncated, _ = envs.step(np.ones(2, np.int64))
        np.testing.assert_array_equal(truncated, [True, True])
    # A mistyped option of the builder reaches gym.make: named before any worker starts.
    with pytest.raises(ValueError) as refused:
        BatchEnv.external("CartPole-v1", 2, envs_per_wroker=2)
    assert str(refused.value) == (
        "env 'CartPole-v1' takes no keyword 'envs_per_wroker' in env_kwargs: it takes "
        "sutton_barto_reward, render_mode, and gym.make's disable_env_checker, max_episode_steps"
    )
    # gym.make's own keywords, which the builders take, point a typo at the one meant.
    with pytest.raises(ValueError, match=r"'max_episode_step' in env_kwargs \(did you mean "):
        BatchEnv.external("CartPole-v1", 2, max_episode_step=3)
    # AsyncVectorEnv's own arguments, as code moved from it passes them: its defaults were
    # refused too. Values that say what a BatchEnv does are taken; the others named.
    cartpoles = [lambda: gym.make("CartPole-v1")] * 2
    given = dict(shared_memory=False, copy=False, daemon=True, worker=None)
    with BatchEnv.external(cartpoles, **given) as envs:
        assert envs.reset(seed=0)[0].shape == (2, 4)
    with pytest.raises(TypeError) as refused:
        BatchEnv.external(cartpoles, daemon=False)
    assert str(refused.value) == (
        "AsyncVectorEnv's daemon=False has no counterpart here: a BatchEnv takes daemon=True "
        "(its workers are daemon processes, ended with it), or none"
    )
    with pytest.raises(TypeError, match=r"^AsyncVectorEnv's copy='no' has no counterpart here: "):
        BatchEnv.external(cartpoles, copy="no")
    with pytest.raises(TypeError) as refused:
        BatchEnv.external(lambda: gym.make("CartPole-v1"), 2, render_mode="rgb_array")
    assert str(refused.value) == (
        "keywords ['render_mode'] go to gym.make with a Gymnasium id; a constructor takes its "
        "own (functools.partial(make, ...))"
    )


def test_max_concurrency_as_gymnasium_1_4_gives_it_is_how_many_workers_step_the_envs():
    # AsyncVectorEnv(env_fns, max_concurrency=2) moved here named the keyword an env's.
    cartpoles = [lambda: gym.make("CartPole-v1")] * 5
    with BatchEnv.external(cartpoles, max_concurrency=2) as envs:
        assert [group.num_envs for group in envs.groups] == [3, 2]
        sync = gym.vector.SyncVectorEnv(cartpoles)
        np.testing.assert_array_equal(envs.reset(seed=0)[0], sync.reset(seed=0)[0])
        actions = np.array([0, 1, 1, 0, 1])
        np.testing.assert_array_equal(envs.step(actions)[0], sync.step(actions)[0])
    # As many workers as asked, the envs shared out evenly: 2, 2 and 1 stepped 3 at once.
    with BatchEnv.external(cartpoles, max_concurrency=4) as envs:
        assert [group.num_envs for group in envs.groups] == [2, 1, 1, 1]
    with BatchEnv.external(cartpoles, max_concurrency=9) as envs:  # One worker an env.
        assert [group.num_envs for group in envs.groups] == [1] * 5
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError) as refused:
            BatchEnv.external(cartpoles, max_concurrency=bad)
        assert str(refused.value) == (
            f"max_concurrency must be a whole number of at least 1 or None, got {bad!r}"
        )
    with pytest.raises(ValueError, match=r"^max_concurrency=2 sets how many worker processes"):
        BatchEnv.external(cartpoles, max_concurrency=2, envs_per_worker=1)
    with pytest.raises(ValueError, match=r"give it, or envs_per_worker and local_envs, not both$"):
        BatchEnv.external(cartpoles, max_concurrency=2, local_envs=1)

"""A batch's arguments: what `BatchEnv.external` is given is checked and named in one line."""

import gymnasium as gym
import pytest

from batchrl.envs import BatchEnv


def make_cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize(
    ("env", "num_envs", "options", "error", "message"),
    [
        (
            "env object",
            2,
            {},
            TypeError,
            r"env must be a Gymnasium id, a constructor or a list of constructors, got "
            r"<TimeLimit<.*CartPole-v1>>>>>: batch env objects with BatchEnv.from_envs",
        ),
        (
            "env objects",
            None,
            {},
            TypeError,
            r"got <TimeLimit<.*>>>>> in place 1 of the list: batch env objects with",
        ),
        (make_cartpole, 0, {}, ValueError, "num_envs must be a whole number of at least 1, got 0"),
        ("CartPole-v1", 2.0, {}, ValueError, "num_envs must be a whole number .* got 2.0"),
        (
            "CartPole-v1",
            2,
            {"envs_per_worker": 0},
            ValueError,
            "envs_per_worker must be a whole number of at least 1, got 0",
        ),
    ],
    ids=["env-object", "list-with-an-env-object", "no-envs", "float-count", "no-envs-per-worker"],
)
def test_what_external_cannot_build_is_named_in_one_line(env, num_envs, options, error, message):
    if env == "env object":
        env = make_cartpole()
    elif env == "env objects":
        env = [make_cartpole, make_cartpole()]
    with pytest.raises(error, match=message) as raised:
        BatchEnv.external(env, num_envs, **options).close()
    assert "\n" not in str(raised.value)

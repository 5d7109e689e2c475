"""A batch's arguments: what `BatchEnv.external` and `.ray` take, named in one line when bad."""

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


def test_a_seed_reset_cannot_use_is_named_in_one_line():
    allowed = r"give an int, a list of one int or None per env, or None"
    env = BatchEnv.from_envs([make_cartpole() for _ in range(2)])
    try:
        for seed, why in (
            ("a", "seed='a'"),
            ("ab", "seed='ab'"),
            (1.5, "seed=1.5"),
            ([1, "x"], r"seed=\[1, 'x'\], whose 'x' is not an int"),
            ([1.0, 2.0], r"seed=\[1.0, 2.0\], whose 1.0 is not an int"),
        ):
            with pytest.raises(TypeError, match=rf"^reset got {why}: {allowed}$"):
                env.reset(seed=seed)
        with pytest.raises(ValueError, match=rf"^reset got 1 seed for 2 envs: {allowed}$"):
            env.reset(seed=[1])
        obs, _ = env.reset(seed=[3, None])  # Refused calls leave the batch as it was.
        assert obs.shape == (2, 4)
    finally:
        env.close()


@pytest.mark.parametrize("timeout", ["5", float("nan"), float("inf"), True, 0, -1.0])
def test_a_timeout_that_is_not_positive_seconds_is_named_in_one_line(timeout):
    message = rf"^timeout must be a positive number of seconds or None, got {timeout!r}$"
    with pytest.raises(ValueError, match=message):
        BatchEnv.external("CartPole-v1", 2, timeout=timeout).close()


def test_ray_refuses_a_timeout_before_it_starts_ray():
    pytest.importorskip("ray")
    message = r"^timeout must be a positive number of seconds or None, got '5'$"
    with pytest.raises(ValueError, match=message):
        BatchEnv.ray("CartPole-v1", 2, timeout="5")  # A refused call starts no Ray.

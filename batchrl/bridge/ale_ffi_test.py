import os

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv

from batchrl import simulate
from batchrl.bridge import ale_ffi

SEED = 3
# Breakout: lost lives end episodes (the game plays on), game overs end games. Pong: a
# game lasts longer than these rollouts, so a cap of 60 steps (240 frames) truncates them.
GAMES = {
    "breakout": {"life_loss_info": True},
    "pong": {"max_num_frames_per_episode": 240},
}


def table_agent(actions):
    """An agent that plays actions [T, B] in turn, its state the step count."""
    table = jnp.asarray(actions)

    def perform(t, obs, key):
        del obs, key
        return t + 1, table[t], ()

    def same(t, _):
        return t

    return simulate.Agent(same, perform, lambda t, transition, extra: (t, extra), same)


def ffi_rollout(env, actions, pieces=2):
    """simulate.rollout through `env`, in `pieces` calls of one compiled program."""
    steps = len(actions) // pieces
    agent = table_agent(actions)
    run = jax.jit(lambda state, t: simulate.rollout(env, agent, state, t, steps))
    state, t, records = simulate.init(env, jax.random.key(0)), jnp.zeros((), jnp.int32), []
    for _ in range(pieces):
        state, t, record = run(state, t)
        records.append(jax.tree.map(np.asarray, record.transition))
    return jax.tree.map(lambda *parts: np.concatenate(parts), *records)


def host_rollout(vector_env, actions, life_ends):
    """The same episodes stepped on the host: reset what ended (not a game playing on), step.

    Returns the transitions' columns [T, B, ...] and the number of envs reset.
    """
    num_envs = vector_env.num_envs
    obs, info = vector_env.reset(seed=ale_ffi.ale_seeds(SEED, num_envs))
    lives = info["lives"]
    done, plays_on, resets = np.zeros(num_envs, bool), np.zeros(num_envs, bool), 0
    columns = {"obs": [], "next_obs": [], "reward": [], "terminated": [], "truncated": []}
    for action in actions:
        fresh, plays_on = done & ~plays_on, plays_on & ~done
        resets += fresh.sum()
        if fresh.any():
            seeds = np.full(fresh.sum(), -1)
            obs, info = vector_env.reset(seed=seeds, options={"reset_mask": fresh})
            lives = info["lives"]
        columns["obs"].append(obs.copy())
        obs, reward, terminated, truncated, info = vector_env.step(action)
        lost_a_life = (info["lives"] < lives) & (info["lives"] > 0)
        plays_on = life_ends & terminated & ~truncated & lost_a_life
        lives, done = info["lives"], terminated | truncated
        for name, value in zip(
            ("next_obs", "reward", "terminated", "truncated"),
            (obs.copy(), reward, terminated, truncated),
            strict=True,
        ):
            columns[name].append(value)
    return {name: np.stack(values) for name, values in columns.items()}, resets


def close(vector_env):
    vector_env.ale = None  # The last reference to ale-py's C++ batch: its threads join.


@pytest.mark.parametrize("game", GAMES)
def test_a_rollout_through_the_ffi_calls_is_the_one_stepped_on_the_host(game):
    num_envs, steps = 4, 240
    options = {**GAMES[game], "num_threads": 2}
    actions = np.random.default_rng(0).integers(0, 4, (steps, num_envs)).astype(np.int32)
    vector_env = AtariVectorEnv(game, num_envs, **options)
    reference = AtariVectorEnv(game, num_envs, **options)
    try:
        env = ale_ffi.AleFfiEnv(vector_env, seed=SEED, life_ends=game == "breakout")
        got = ffi_rollout(env, actions)
        want, resets = host_rollout(reference, actions, life_ends=game == "breakout")
    finally:
        close(vector_env), close(reference)
    assert got.obs.dtype == np.uint8 and got.obs.shape == (steps, num_envs, 4, 84, 84)
    assert got.reward.dtype == np.float32
    for name, value in want.items():
        np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
    # Episodes ended every way these games end: at lost lives and game overs (which
    # reset the game), at the time limit.
    if game == "breakout":
        assert 0 < resets < want["terminated"].sum() and want["reward"].sum() > 0
    else:
        assert want["truncated"].sum() >= 3 * num_envs and resets >= 2 * num_envs


def test_masked_resets_reset_exactly_those_envs_as_ale_py_does():
    # Counts of 5, 7 and 8 envs: calls of sizes 4 + 1, 4 + 2 + 1, and one of 8.
    masks = np.array([[1, 0, 1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 0], [1] * 8], bool)
    vector_env = AtariVectorEnv("breakout", 8, num_threads=2)
    reference = AtariVectorEnv("breakout", 8, num_threads=2)
    try:
        env = ale_ffi.AleFfiEnv(vector_env, seed=SEED)
        step, reset = jax.jit(env.step), jax.jit(env.reset)
        state, _ = env.init(jax.random.key(0))
        reference.reset(seed=ale_ffi.ale_seeds(SEED, 8))
        for mask in masks:
            state, time_step = step(state, jnp.full((8,), 3, jnp.int32))
            state, obs = reset(state, time_step.obs, jax.random.key(0), jnp.asarray(mask))
            stepped = reference.step(np.full(8, 3, np.int32))[0]
            seeds = np.full(mask.sum(), -1)
            want, info = reference.reset(seed=seeds, options={"reset_mask": mask})
            np.testing.assert_array_equal(obs, want)
            np.testing.assert_array_equal(state.lives, info["lives"])
            # The envs left out keep their frames; those reset start anew.
            kept = (np.asarray(obs) == stepped).all(axis=(1, 2, 3))
            np.testing.assert_array_equal(kept, ~mask)
    finally:
        close(vector_env), close(reference)


def test_a_state_of_another_batch_steps_this_envs_games():
    """A restored state holds another process's handle: the calls step this env's games."""
    envs = [AtariVectorEnv("pong", 2, num_threads=1) for _ in range(2)]
    try:
        first, second = (ale_ffi.AleFfiEnv(v, seed=SEED) for v in envs)
        state_1, _ = first.init(jax.random.key(0))
        state_2, _ = second.init(jax.random.key(0))
        action = jnp.array([2, 3], jnp.int32)
        # The second env stepped with the first's state (handle included), then the first.
        _, on_second = jax.jit(second.step)(state_1, action)
        _, on_first = jax.jit(first.step)(state_1, action)
        _, again = jax.jit(second.step)(state_2.replace(handle=jnp.zeros(8, jnp.uint8)), action)
    finally:
        for v in envs:
            close(v)
    np.testing.assert_array_equal(on_second.obs, on_first.obs)  # One step each, not two.
    np.testing.assert_array_equal(again.obs[:, :3], on_first.obs[:, 1:])


def task_count():
    return len(os.listdir("/proc/self/task"))


def test_after_close_no_thread_is_left_and_programs_refuse_to_run():
    before = task_count()
    vector_env = AtariVectorEnv("pong", 3, num_threads=2)
    env = ale_ffi.AleFfiEnv(vector_env, seed=SEED)
    run = simulate.make_collect(env, table_agent(np.zeros((4, 3), np.int32)), 4)
    state = simulate.init(env, jax.random.key(0))
    run(state, jnp.zeros((), jnp.int32))
    assert task_count() == before + 2
    close(vector_env)
    assert task_count() == before
    assert env.closed
    with pytest.raises(gym.error.ClosedEnvironmentError, match="are closed"):
        run(state, jnp.zeros((), jnp.int32))
    with pytest.raises(gym.error.ClosedEnvironmentError, match="are closed"):
        simulate.init(env, jax.random.key(0))


def test_what_the_ffi_calls_cannot_serve_is_refused_in_one_line():
    cases = [
        ({}, {"devices": 2}, r"learner_devices must be 1, got 2"),
        ({}, {"seed": -1}, r"seed must be at least 0, got -1"),
        ({"batch_size": 1}, {}, r"batch_size must equal num_envs \(2\), got 1"),
        ({"autoreset_mode": "SameStep"}, {}, r"need autoreset_mode NEXT_STEP"),
    ]
    for vector_options, options, message in cases:
        vector_env = AtariVectorEnv("pong", 2, num_threads=1, **vector_options)
        try:
            with pytest.raises(ValueError, match=message) as error:
                ale_ffi.AleFfiEnv(vector_env, **options)
        finally:
            close(vector_env)
        assert "\n" not in str(error.value)

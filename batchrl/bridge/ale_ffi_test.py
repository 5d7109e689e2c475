import os
import pathlib
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import bridge, simulate
from batchrl.bridge import ale_ffi
from batchrl.envs import BatchEnv

SEED = 3
# Breakout: lost lives end episodes (the game plays on), game overs end games. Pong: a
# game lasts longer than these rollouts, so a cap of 240 frames (60 steps) truncates them.
# Breakout again, its paddle moved by continuous actions (radius, angle, fire).
GAMES = {
    "breakout": {"life_loss_info": True},
    "pong": {"max_num_frames_per_episode": 240},
    "breakout_continuous": {"continuous": True},
}


def random_actions(game, steps, num_envs):
    rng = np.random.default_rng(0)
    if game.endswith("continuous"):
        return rng.uniform([0, -np.pi, 0], [1, np.pi, 1], (steps, num_envs, 3)).astype(np.float32)
    return rng.integers(0, 4, (steps, num_envs)).astype(np.int32)


def table_agent(actions):
    """An agent that plays actions [T, B] in turn, its state the step count."""
    table = jnp.asarray(actions)

    def perform(t, obs, key):
        del obs, key
        return t + 1, table[t], ()

    def same(t, _):
        return t

    return simulate.Agent(same, perform, lambda t, transition, extra: (t, extra), same)


def rollout(env, actions, pieces=2):
    """simulate.rollout through `env`, in `pieces` calls of one compiled program."""
    steps = len(actions) // pieces
    agent = table_agent(actions)
    run = jax.jit(lambda state, t: simulate.rollout(env, agent, state, t, steps))
    state, t, records = simulate.init(env, jax.random.key(0)), jnp.zeros((), jnp.int32), []
    for _ in range(pieces):
        state, t, record = env.wrap_compiled(run)(state, t)
        records.append(jax.tree.map(np.asarray, record.transition))
    return jax.tree.map(lambda *parts: np.concatenate(parts), *records)


@pytest.mark.parametrize("game", GAMES)
def test_a_rollout_through_the_ffi_calls_is_the_one_through_the_host_callback(game):
    num_envs, steps = 4, 240 if game != "breakout_continuous" else 60
    actions = random_actions(game, steps, num_envs)
    rom = game.split("_")[0]
    with (
        BatchEnv.atari(rom, num_envs, threads=2, **GAMES[game]) as ffi_batch,
        BatchEnv.atari(rom, num_envs, threads=2, **GAMES[game]) as callback_batch,
    ):
        got = rollout(ale_ffi.AleFfiBatch(ffi_batch, seed=SEED), actions)
        want = rollout(bridge.InGraphBatchEnv(callback_batch, seed=SEED), actions)
    assert got.obs.dtype == np.uint8 and got.obs.shape == (steps, num_envs, 4, 84, 84)
    assert got.reward.dtype == np.float32
    for name in ("obs", "action", "reward", "terminated", "truncated", "next_obs"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    # Episodes ended every way these games end: at lost lives (the game plays on) and at
    # game overs, at the time limit.
    ends = want.terminated | want.truncated
    if game == "breakout":
        lives_lost, game_overs = lost_lives(want), ends & ~lost_lives(want)
        assert lives_lost.sum() >= 4 * num_envs and game_overs.sum() >= 2
    elif game == "pong":
        assert want.truncated.sum() >= 3 * num_envs and not want.terminated.any()
    else:  # The actions reached both ways as they are: float32 triples.
        assert got.action.dtype == np.float32 and got.action.shape == (steps, num_envs, 3)


def lost_lives(transitions):
    """[T, B] bool: the episode ended and the game went on: no reset, the next step starts
    from the frames the last one ended on."""
    went_on = (transitions.obs[1:] == transitions.next_obs[:-1]).all(axis=(2, 3, 4))
    ended = transitions.terminated[:-1] & went_on
    return np.concatenate([ended, np.zeros_like(ended[:1])])


def test_masked_resets_reset_exactly_those_envs_as_the_host_callback_does():
    # Counts of 5, 7 and 8 envs: calls of sizes 4 + 1, 4 + 2 + 1, and one of 8.
    masks = np.array([[1, 0, 1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 0], [1] * 8], bool)
    with (
        BatchEnv.atari("breakout", 8, threads=2) as ffi_batch,
        BatchEnv.atari("breakout", 8, threads=2) as callback_batch,
    ):
        envs = (
            ale_ffi.AleFfiBatch(ffi_batch, seed=SEED),
            bridge.InGraphBatchEnv(callback_batch, seed=SEED),
        )
        steps, resets = [jax.jit(env.step) for env in envs], [jax.jit(env.reset) for env in envs]
        states = [env.init(jax.random.key(0))[0] for env in envs]
        action = jnp.full((8,), 3, jnp.int32)
        for mask in masks:
            got = []
            for n in range(2):
                states[n], time_step = steps[n](states[n], action)
                key = jax.random.key(0)
                states[n], obs = resets[n](states[n], time_step.obs, key, jnp.asarray(mask))
                got.append((np.asarray(time_step.obs), np.asarray(obs)))
            (stepped, obs), (_, want) = got
            np.testing.assert_array_equal(obs, want)
            # The envs left out keep their frames; those reset start anew.
            np.testing.assert_array_equal((obs == stepped).all(axis=(1, 2, 3)), ~mask)


def test_a_state_of_another_batch_steps_this_envs_games():
    """A restored state holds another process's handle: the calls step this env's games."""
    with BatchEnv.atari("pong", 2, threads=1) as one, BatchEnv.atari("pong", 2, threads=1) as two:
        first, second = ale_ffi.AleFfiBatch(one, seed=SEED), ale_ffi.AleFfiBatch(two, seed=SEED)
        state_1, _ = first.init(jax.random.key(0))
        state_2, _ = second.init(jax.random.key(0))
        action = jnp.array([2, 3], jnp.int32)
        # The second env stepped with the first's state (handle included), then the first.
        _, on_second = jax.jit(second.step)(state_1, action)
        _, on_first = jax.jit(first.step)(state_1, action)
        _, again = jax.jit(second.step)(state_2.replace(handle=jnp.zeros(8, jnp.uint8)), action)
    np.testing.assert_array_equal(on_second.obs, on_first.obs)  # One step each, not two.
    np.testing.assert_array_equal(again.obs[:, :3], on_first.obs[:, 1:])


def task_count():
    return len(os.listdir("/proc/self/task"))


def test_after_close_no_thread_is_left_and_programs_refuse_to_run():
    batch_env = BatchEnv.atari("pong", 3, threads=2)
    env = ale_ffi.AleFfiBatch(batch_env, seed=SEED)
    run = simulate.make_collect(env, table_agent(np.zeros((4, 3), np.int32)), 4)
    state = simulate.init(env, jax.random.key(0))
    run(state, jnp.zeros((), jnp.int32))  # XLA's own threads have started by now.
    running = task_count()
    batch_env.close()
    assert task_count() == running - 2  # The games' two threads ended.
    assert env.closed
    with pytest.raises(gym.error.ClosedEnvironmentError, match="is closed"):
        run(state, jnp.zeros((), jnp.int32))
    with pytest.raises(gym.error.ClosedEnvironmentError, match="is closed"):
        simulate.init(env, jax.random.key(0))


# Closes the games while their reset is queued behind a slow program, three times.
CLOSE_WHILE_QUEUED = """
import jax, jax.numpy as jnp
from batchrl.bridge import ale_ffi
from batchrl.envs import BatchEnv

slow = jax.jit(lambda x: jax.lax.fori_loop(0, 300, lambda i, x: jnp.tanh(x @ x), x))
slow(jnp.ones((256, 256))).block_until_ready()
for seed in range(3):
    batch_env = BatchEnv.atari("pong", 4, threads=2)
    env = ale_ffi.AleFfiBatch(batch_env, seed=seed)
    busy = slow(jnp.ones((256, 256)))
    state, obs = env.init(jax.random.key(0))
    batch_env.close()
    jax.block_until_ready((busy, state, obs))
    print(seed, obs.shape, int(obs.max()), flush=True)
"""


def test_closing_while_a_call_is_queued_waits_for_it_and_the_call_completes():
    # Freed under a queued call, the games crashed the process (or left it waiting).
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_WHILE_QUEUED],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["0", "1", "2"]
    assert all("(4, 4, 84, 84)" in line and int(line.split()[-1]) > 0 for line in lines)


def test_what_the_ffi_calls_cannot_serve_is_refused_in_one_line():
    with BatchEnv.atari("pong", 2, threads=1) as batch_env:
        for options, message in [
            ({"devices": 2}, r"learner_devices must be 1, got 2"),
            ({"seed": -1}, r"seed must be at least 0, got -1"),
        ]:
            with pytest.raises(ValueError, match=message) as error:
                ale_ffi.AleFfiBatch(batch_env, **options)
            assert "\n" not in str(error.value)
        wrapped = gym.wrappers.vector.RecordEpisodeStatistics(batch_env)
        refused = r"^AleFfiBatch takes a batchrl BatchEnv, got RecordEpisodeStatistics, a Gym"
        with pytest.raises(TypeError, match=refused):
            ale_ffi.AleFfiBatch(wrapped)
    refused = pytest.raises(ValueError, match=r"steps the games of a BatchEnv.atari, got Batch")
    with BatchEnv.from_envs([gym.make("CartPole-v1")]) as batch_env, refused:
        ale_ffi.AleFfiBatch(batch_env)

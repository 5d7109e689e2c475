import dataclasses
import functools
from typing import ClassVar

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env
from batchrl.envs.jax.classic import cartpole, pendulum


@flax.struct.dataclass
class _CountingState:
    count: jax.Array
    tag: jax.Array


@dataclasses.dataclass(frozen=True)
class _CountingEnv:
    """Terminates after `end` steps (never if 0); obs [count, tag], tag drawn at reset."""

    end: int = 0
    env_spec: ClassVar[EnvSpec] = EnvSpec(env_spec_lib.vector((2,)), discrete=True, num_actions=3)
    max_length: ClassVar[int] = 4

    def reset(self, key):
        state = _CountingState(jnp.zeros((), jnp.int32), jax.random.uniform(key))
        return state, self._obs(state)

    def step(self, env_state, action):
        state = env_state.replace(count=env_state.count + 1)
        terminated = (state.count >= self.end) & (self.end > 0)
        time_step = jax_env.TimeStep(
            self._obs(state), action.astype(jnp.float32), terminated, jnp.zeros((), bool)
        )
        return state, time_step

    def _obs(self, state):
        return jnp.stack([state.count.astype(jnp.float32), state.tag])


@dataclasses.dataclass(frozen=True)
class _DictEnv(_CountingEnv):
    """_CountingEnv with a Dict observation: its obs, the count as a discrete leaf, a uint8 grid."""

    env_spec: ClassVar[EnvSpec] = EnvSpec(
        {
            "vector": env_spec_lib.vector((2,)),
            "count": env_spec_lib.ObsLeaf((), "int32", env_spec_lib.DISCRETE, (100,), (0,)),
            "grid": (env_spec_lib.ObsLeaf((2, 3), "uint8", env_spec_lib.VECTOR),),
        },
        discrete=True,
        num_actions=3,
    )

    def _obs(self, state):
        grid = jnp.full((2, 3), (state.tag * 255).astype(jnp.uint8) + state.count.astype(jnp.uint8))
        return {"vector": super()._obs(state), "count": state.count, "grid": (grid,)}


@functools.cache
def _unroll(env, length):
    """Steps one env `length` times from reset with action 1; TimeStep [length, ...]."""

    def unroll(key):
        state, _ = env.reset(key)
        actions = jnp.ones((length, *env.env_spec.action_shape), jnp.int32)
        return jax.lax.scan(env.step, state, actions)[1]

    return jax.jit(unroll)


def test_a_wrapped_env_batches_and_steps_as_the_env_it_wraps():
    for env in (_CountingEnv(), jax_env.TimeLimit(_CountingEnv())):
        batched = jax_env.VmapBatch(env, 3)
        assert env.env_spec == _CountingEnv.env_spec
        state, obs = jax.jit(batched.init)(jax.random.key(0))
        assert obs.shape == (3, 2) and len(set(obs[:, 1].tolist())) == 3  # A tag per env.
        state, time_step = jax.jit(batched.step)(state, jnp.full((3,), 2, jnp.int32))
        np.testing.assert_array_equal(time_step.obs[:, 0], [1.0, 1.0, 1.0])
        np.testing.assert_array_equal(time_step.reward, [2.0, 2.0, 2.0])


@pytest.mark.parametrize(
    ("env", "duration", "max_length"),
    [(_CountingEnv(), None, 4), (pendulum.Pendulum(), None, 200), (cartpole.CartPole(), 3, 3)],
)
def test_limit_duration_truncates_exactly_at_max_length_and_never_terminates(
    env, duration, max_length
):
    limited = jax_env.TimeLimit(env, duration)
    assert limited.max_length == max_length
    duration = max_length
    time_step = _unroll(limited, duration)(jax.random.key(0))
    expected = np.arange(1, duration + 1) == duration
    np.testing.assert_array_equal(time_step.truncated, expected)
    assert not time_step.terminated.any()


def test_limit_duration_passes_termination_through_unchanged():
    time_step = _unroll(jax_env.TimeLimit(_CountingEnv(end=3), 5), 3)(jax.random.key(0))
    np.testing.assert_array_equal(time_step.terminated, [False, False, True])
    assert not time_step.truncated.any()
    both = _unroll(jax_env.TimeLimit(_CountingEnv(end=3), 3), 3)(jax.random.key(0))
    assert both.terminated[-1] and both.truncated[-1]


def test_limit_duration_restarts_its_count_at_reset():
    env = jax_env.TimeLimit(_CountingEnv(), 2)
    state, _ = env.reset(jax.random.key(0))
    state, _ = env.step(state, jnp.ones((), jnp.int32))
    assert state.elapsed_steps == 1
    state, _ = env.reset(jax.random.key(1))
    assert state.elapsed_steps == 0


def test_limit_duration_rejects_a_duration_below_one():
    with pytest.raises(ValueError, match="at least 1"):
        jax_env.TimeLimit(_CountingEnv(), 0)


@pytest.mark.parametrize("env", [_CountingEnv(), _DictEnv()])
def test_reset_where_resets_only_masked_envs(env):
    env = jax_env.TimeLimit(env)
    reset_key, key = jax.random.split(jax.random.key(0))
    mask = jnp.array([True, False, True, False])

    @jax.jit
    def run(state, obs):
        for _ in range(2):
            state, time_step = jax_env.step_batch(env, state, jnp.ones(4, jnp.int32))
            obs = time_step.obs
        return (state, obs), jax_env.reset_where(env, state, obs, key, mask)

    (old_state, old_obs), (state, obs) = run(*jax_env.reset_batch(env, reset_key, 4))
    fresh_state, fresh_obs = jax_env.reset_batch(env, key, 4)
    np.testing.assert_array_equal(state.elapsed_steps, [0, 2, 0, 2])
    np.testing.assert_array_equal(state.env_state.count, [0, 2, 0, 2])
    assert jax.tree.structure(obs) == jax.tree.structure(old_obs)
    for leaf, fresh, old in zip(*map(jax.tree.leaves, (obs, fresh_obs, old_obs)), strict=True):
        assert leaf.dtype == old.dtype and leaf.shape == old.shape
        np.testing.assert_array_equal(leaf[0::2], fresh[0::2])
        np.testing.assert_array_equal(leaf[1::2], old[1::2])
        assert not np.array_equal(leaf[0::2], old[0::2])  # The reset changed every leaf.
    np.testing.assert_array_equal(state.env_state.tag[0::2], fresh_state.env_state.tag[0::2])
    np.testing.assert_array_equal(state.env_state.tag[1::2], old_state.env_state.tag[1::2])


def test_a_dict_observation_keeps_its_structure_and_dtypes_through_batching():
    env = jax_env.VmapBatch(jax_env.TimeLimit(_DictEnv()), 3)
    state, obs = jax.jit(env.init)(jax.random.key(0))
    state, time_step = jax.jit(env.step)(state, jnp.ones(3, jnp.int32))
    expected = env_spec_lib.map_tree(
        lambda leaf: ((3, *leaf.shape), leaf.dtype), env.env_spec.observation
    )
    for tree in (obs, time_step.obs):
        assert jax.tree.map(lambda a: (a.shape, a.dtype.name), tree) == expected
    np.testing.assert_array_equal(time_step.obs["count"], [1, 1, 1])


def test_batch_helpers_check_the_batch_size():
    env = _CountingEnv()
    state, obs = jax_env.reset_batch(env, jax.random.key(0), 3)
    with pytest.raises(ValueError, match=r"action has shape \(2,\), expected \(3,\)"):
        jax_env.step_batch(env, state, jnp.ones(2, jnp.int32))
    with pytest.raises(ValueError, match="batch size 3"):
        jax_env.reset_where(env, state, obs, jax.random.key(1), jnp.ones(2, bool))


def test_floats_for_integer_actions_are_refused_not_truncated():
    # Cast by the env, 0.9 stepped CartPole with 0.
    env = jax_env.VmapBatch(cartpole.CartPole(), 2)
    state, _ = env.init(jax.random.key(0))
    with pytest.raises(
        TypeError, match=r"^actions of dtype float32 do not fit this batch's action dtype int"
    ):
        env.step(state, jnp.full((2,), 0.9))
    env.step(state, jnp.ones((2,), jnp.int32))


def _actions(env, key, shape):
    if env.env_spec.discrete:
        return jax.random.randint(key, shape, 0, env.env_spec.num_actions)
    return jax.random.uniform(key, (*shape, *env.env_spec.action_shape), minval=-3, maxval=3)


def _scan_rollout(env, state, obs, keys, actions):
    """A jitted rollout of a batch: step, then reset the envs that ended. Returns [T, B, ...]."""

    def body(carry, inputs):
        state, obs = carry
        key, action = inputs
        state, time_step = jax_env.step_batch(env, state, action)
        done = time_step.terminated | time_step.truncated
        state, obs = jax_env.reset_where(env, state, time_step.obs, key, done)
        return (state, obs), (time_step, obs)

    return jax.lax.scan(body, (state, obs), (keys, actions))[1]


def _loop_rollout(env, start_key, keys, actions):
    """The same rollout as a Python loop of single, unbatched steps of each env."""
    length, num_envs = actions.shape[:2]
    step, reset = jax.jit(env.step), jax.jit(env.reset)
    start_keys = jax.random.split(start_key, num_envs)  # As reset_batch splits.
    reset_keys = jax.vmap(lambda key: jax.random.split(key, num_envs))(keys)  # [T, B]
    actions = np.asarray(actions)
    obs, next_obs = (
        env_spec_lib.map_tree(
            lambda leaf: np.zeros((length, num_envs, *leaf.shape)), env.env_spec.observation
        )
        for _ in range(2)
    )
    reward, terminated, truncated = (np.zeros((length, num_envs)) for _ in range(3))
    for i in range(num_envs):
        state, _ = reset(start_keys[i])
        for t in range(length):
            state, time_step = step(state, actions[t, i])
            time_step = jax.device_get(time_step)
            env_spec_lib.map_tree(functools.partial(_put, (t, i)), obs, time_step.obs)
            env_spec_lib.map_tree(functools.partial(_put, (t, i)), next_obs, time_step.obs)
            reward[t, i] = time_step.reward
            terminated[t, i], truncated[t, i] = time_step.terminated, time_step.truncated
            if time_step.terminated or time_step.truncated:
                state, fresh = reset(reset_keys[t, i])
                env_spec_lib.map_tree(functools.partial(_put, (t, i)), next_obs, fresh)
    return jax_env.TimeStep(obs, reward, terminated, truncated), next_obs


def _put(index, array, value):
    array[index] = value


@pytest.mark.parametrize(
    ("env", "length"),
    [
        (jax_env.TimeLimit(pendulum.Pendulum(), 5), 12),
        (jax_env.TimeLimit(cartpole.CartPole()), 40),
        (jax_env.TimeLimit(_DictEnv(end=3), 4), 9),
    ],
)
def test_jitted_scan_rollout_matches_a_python_loop_of_single_steps(env, length):
    num_envs = 3
    start_key, step_key, action_key = jax.random.split(jax.random.key(0), 3)
    keys = jax.random.split(step_key, length)
    actions = _actions(env, action_key, (length, num_envs))
    state, obs = jax_env.reset_batch(env, start_key, num_envs)

    time_step, next_obs = jax.jit(functools.partial(_scan_rollout, env))(state, obs, keys, actions)
    expected, expected_next_obs = _loop_rollout(env, start_key, keys, actions)

    done = np.asarray(time_step.terminated | time_step.truncated)
    assert done.any() and not done.all()
    np.testing.assert_array_equal(time_step.terminated, expected.terminated)
    np.testing.assert_array_equal(time_step.truncated, expected.truncated)
    np.testing.assert_allclose(time_step.reward, expected.reward, rtol=1e-6, atol=1e-6)
    for got, want in [(time_step.obs, expected.obs), (next_obs, expected_next_obs)]:
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), got, want)

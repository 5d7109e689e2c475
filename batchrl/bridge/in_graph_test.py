import contextlib
import functools
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import bridge
from batchrl import env_spec as env_spec_lib
from batchrl.bridge import in_graph, seeds
from batchrl.env_spec import EnvSpec
from batchrl.envs import BatchEnv
from batchrl.envs.host import errors
from batchrl.testing import mock


@pytest.mark.parametrize("in_place", [True, False])
def test_jitted_steps_match_stepping_the_batch_directly(in_place):
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 3, 6)).astype(np.float32)
    with BatchEnv.external("HalfCheetah-v5", 3) as direct:
        obs, _ = direct.reset(seed=seeds.env_seeds(7, 3))  # As the bridge seeds them.
        expected = [obs]
        for action in actions:
            expected.append(direct.step(action)[0])
    with BatchEnv.external("HalfCheetah-v5", 3, envs_per_worker=2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=7, in_place=in_place)
        state, obs = jax.jit(env.init)(jax.random.key(0))
        assert obs.dtype == jnp.float32  # MuJoCo's float64 observations arrive as float32.
        first = int(state.token)
        step = jax.jit(env.step)
        seen = [obs]
        for action in actions:
            state, time_step = step(state, jnp.asarray(action))
            seen.append(time_step.obs)
        np.testing.assert_allclose(np.array(seen), np.array(expected), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state.action, actions[-1])
        assert int(state.token) == first + 20  # A call a step, each counted.


@pytest.mark.parametrize(
    ("dtype", "compiled"),
    [
        ("float64", "float32"),
        ("int64", "int32"),
        ("uint64", "uint32"),
        ("float32", "float32"),
        ("float16", "float16"),
        ("uint8", "uint8"),
        ("int8", "int8"),
        ("bool", "bool"),
    ],
)
def test_compiled_dtypes_narrow_64_bits_only(dtype, compiled):
    assert in_graph.compiled_dtype(dtype) == np.dtype(compiled)
    assert in_graph.compiled_dtype(dtype, env_spec_lib.DISCRETE) == np.dtype(compiled)


def test_a_box_of_64_bit_integers_arrives_as_float32_not_wrapped():
    # Numbers past 2**31 in a Box: as int32 they wrapped (2**32 + 5 read 5), silently.
    space = gym.spaces.Box(0, 2**40, (2,), np.int64)
    for kind in (env_spec_lib.VECTOR, env_spec_lib.IMAGE):
        assert in_graph.compiled_dtype("int64", kind) == np.float32
    constructors = [functools.partial(mock.SpaceEnv, space, duration=3)] * 2
    with BatchEnv.external(constructors, envs_per_worker=2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=3)
        assert env.env_spec.observation.dtype == "float32"
        _, obs = jax.jit(env.init)(jax.random.key(0))
        host = gym.vector.SyncVectorEnv(constructors).reset(seed=seeds.env_seeds(3, 2))[0]
    assert host.max() > 2**31  # The draws are beyond int32, and arrive rounded only.
    np.testing.assert_allclose(np.asarray(obs), host, rtol=1e-7)


# A nested observation of float64, uint8, int64, bool and int8 leaves; keys out of order.
NESTED = gym.spaces.Dict(
    [
        ("state", gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)),
        ("pixels", gym.spaces.Box(0, 255, (2, 3, 1), np.uint8)),
        (
            "extra",
            gym.spaces.Tuple(
                (
                    gym.spaces.Discrete(5, start=1),
                    gym.spaces.MultiDiscrete([3, 4]),
                    gym.spaces.Box(0, 1, (2,), np.bool_),
                )
            ),
        ),
        ("flags", gym.spaces.MultiBinary(2)),
    ]
)


def _nested_envs(durations):
    """Constructors of envs with the NESTED observation, episodes of durations[i] steps."""
    actions = gym.spaces.MultiDiscrete([3, 2])
    return [functools.partial(mock.SpaceEnv, NESTED, actions, duration=d) for d in durations]


def _same_tree(compiled, host):
    """Compiled leaves equal the host's leaves cast to each compiled leaf's dtype."""
    assert jax.tree.structure(compiled) == jax.tree.structure(host)
    for got, want in zip(jax.tree.leaves(compiled), jax.tree.leaves(host), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))


def test_a_nested_observation_arrives_leaf_by_leaf_in_compiled_dtypes():
    """Step for step and through resets by mask, as SyncVectorEnv on the same seeds."""
    constructors = _nested_envs((2, 3, 4, 6))
    actions = np.random.default_rng(0).integers(0, [3, 2], (12, 4, 2))
    reference = gym.vector.SyncVectorEnv(
        constructors, autoreset_mode=gym.vector.AutoresetMode.DISABLED
    )
    with BatchEnv.external(constructors, envs_per_worker=2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=7)
        compiled_dtypes = {
            "state": "float32",  # float64
            "pixels": "uint8",
            "extra": ("int32", "int32", "bool"),  # int64 (Discrete, MultiDiscrete), bool
            "flags": "int8",  # MultiBinary
        }
        assert env_spec_lib.map_tree(lambda leaf: leaf.dtype, env.env_spec.observation) == (
            compiled_dtypes
        )
        state, obs = jax.jit(env.init)(jax.random.key(0))
        assert jax.tree.map(lambda leaf: leaf.dtype.name, obs) == compiled_dtypes
        _same_tree(obs, reference.reset(seed=seeds.env_seeds(7, 4))[0])
        step, reset = jax.jit(env.step), jax.jit(env.reset)
        for t, action in enumerate(actions):
            state, time_step = step(state, jnp.asarray(action))
            assert state.action.dtype == jnp.int32
            expected = reference.step(action)
            _same_tree(time_step.obs, expected[0])
            np.testing.assert_array_equal(time_step.reward, expected[1].astype(np.float32))
            np.testing.assert_array_equal(time_step.terminated, expected[2])
            done = expected[2] | expected[3]
            assert done.any() == ((t + 1) % 2 == 0 or (t + 1) % 3 == 0)  # Some reset none.
            state, obs = reset(state, time_step.obs, jax.random.key(t), jnp.asarray(done))
            if done.any():
                expected_obs = reference.reset(options={"reset_mask": done})[0]
                _same_tree(obs, expected_obs)
            else:
                _same_tree(obs, time_step.obs)
        assert done.all()  # The last step ends every episode at once.
        reference.close()


def _starts(seed: int, num_envs: int = 4) -> np.ndarray:
    """The first observation of each env of a run seeded `seed`, on Reacher-v5."""
    with BatchEnv.mujoco("Reacher-v5", num_envs) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=seed)
        return np.asarray(jax.jit(env.init)(jax.random.key(0))[1])


def test_runs_of_neighbouring_seeds_start_no_env_alike():
    # Seeding env i with seed + i gave env i + 1 of one run the episodes of env i of the
    # next seed's run, on every task whose episodes never end early (Reacher's last 50
    # steps): a sweep's seeds were evaluated on mostly the same targets.
    first, second = _starts(100), _starts(101)
    shared = [(i, j) for i in range(4) for j in range(4) if np.array_equal(first[i], second[j])]
    assert not shared, f"env i of seed 100 starts as env j of seed 101 for (i, j) in {shared}"
    np.testing.assert_array_equal(_starts(100), first)  # A run's own starts stay reproducible.


def test_given_env_seeds_seed_each_env_and_a_wrong_count_is_one_line():
    with BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(2)]) as batch_env:
        with pytest.raises(ValueError, match=r"^env_seeds holds 1 seeds for 2 envs"):
            bridge.InGraphBatchEnv(batch_env, env_seeds=[5])
        env = bridge.InGraphBatchEnv(batch_env, env_seeds=np.array([5, 6]))
        _, obs = env.init(jax.random.key(0))
    for i, seed in enumerate((5, 6)):
        expected, _ = gym.make("Pendulum-v1").reset(seed=seed)
        np.testing.assert_allclose(np.asarray(obs)[i], expected, rtol=1e-6)


def test_discrete_actions_and_masked_reset():
    with BatchEnv.external(lambda: gym.make("CartPole-v1"), 4) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        assert env.env_spec == EnvSpec(
            env_spec_lib.vector((4,)), True, num_actions=2, action_start=(0,)
        )
        state, _ = env.init(jax.random.key(0))
        state, time_step = env.step(state, jnp.array([0, 1, 0, 1]))
        assert time_step.reward.dtype == jnp.float32
        np.testing.assert_array_equal(time_step.reward, [1.0] * 4)
        mask = jnp.array([True, False, False, True])
        state, fresh = env.reset(state, time_step.obs, jax.random.key(1), mask)
        np.testing.assert_array_equal(fresh[1:3], time_step.obs[1:3])
        assert not np.array_equal(fresh[0], time_step.obs[0])


def test_wrong_action_shape_is_refused_at_trace_time():
    with BatchEnv.external(functools.partial(mock.CountingEnv), 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        state, _ = env.init(jax.random.key(0))
        with pytest.raises(ValueError, match=r"action has shape \(3, 2\), expected \(2, 2\)"):
            env.step(state, jnp.zeros((3, 2)))


def test_floats_for_integer_actions_are_refused_at_trace_time_as_batch_env_refuses_them():
    # Cast, 0.9 stepped CartPole with 0: an agent returning floats trained on action 0.
    refused = r"^actions of dtype float32 do not fit this batch's action dtype int32: give int"
    with BatchEnv.external("CartPole-v1", 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        state, _ = env.init(jax.random.key(0))
        with pytest.raises(TypeError, match=refused):
            env.step(state, jnp.full((2,), 0.9))
        env.step(state, jnp.ones((2,), jnp.int32))
    tree = gym.spaces.Dict({"pick": gym.spaces.Discrete(3), "x": gym.spaces.Box(-1, 1, (1,))})
    maker = functools.partial(mock.ActionEcho, tree)
    with BatchEnv.external(maker, 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        state, _ = env.init(jax.random.key(0))
        x = jnp.zeros((2, 1))
        with pytest.raises(TypeError, match=r"^actions\["):
            env.step(state, {"pick": jnp.full((2,), 1.5), "x": x})
        env.step(state, {"pick": jnp.ones((2,), jnp.int32), "x": x})


@pytest.mark.parametrize("in_place", [True, False])
def test_stepping_under_vmap_says_the_envs_are_one_batch_and_how_seeds_go_together(in_place):
    # jax.vmap(train)(seeds), as on JAX-native envs, met JAX's words for a missing rule.
    refused = r"^host envs cannot be stepped under jax.vmap: .* use `sweep --together`"
    with BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(2)]) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0, in_place=in_place)
        state, obs = env.init(jax.random.key(0))
        actions = jnp.zeros((3, 2, 1))
        with pytest.raises(NotImplementedError, match=refused):
            jax.jit(jax.vmap(env.step, in_axes=(None, 0)))(state, actions)

        def rollout(action: jax.Array) -> jax.Array:  # A scan's body is mapped as a whole.
            step = lambda state, _: (env.step(state, action)[0], None)  # noqa: E731
            return jax.lax.scan(step, state, length=4)[0].reward

        with pytest.raises(NotImplementedError, match=refused):
            jax.vmap(rollout)(actions)
        if in_place:  # Else JAX refuses the effect of io_callback in a mapped cond, first.
            reset = lambda mask: env.reset(state, obs, jax.random.key(1), mask)  # noqa: E731
            with pytest.raises(NotImplementedError, match=refused):
                jax.vmap(reset)(jnp.array([[True, False]] * 3))
        state, step = jax.jit(env.step)(state, actions[0])  # Unmapped, the same bridge steps.
        assert step.reward.shape == (2,)


def test_a_wrapped_batch_or_gymnasiums_own_vector_env_is_refused_in_one_line():
    # The bridge steps the batch beneath Gymnasium's API: a wrapper would be passed by.
    with BatchEnv.from_envs([gym.make("Pendulum-v1") for _ in range(2)]) as batch_env:
        wrapped = gym.wrappers.vector.NormalizeObservation(batch_env)
        with pytest.raises(TypeError) as refused:
            bridge.InGraphBatchEnv(wrapped)
        assert str(refused.value).startswith(
            "InGraphBatchEnv takes a batchrl BatchEnv, got NormalizeObservation, a Gymnasium "
            "vector wrapper over BatchEnv(Pendulum-v1, num_envs=2)"
        )
        assert str(refused.value).endswith("pass the BatchEnv itself")
        assert "\n" not in str(refused.value)
    with contextlib.closing(gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])) as sync:
        wrapped = gym.wrappers.vector.NormalizeObservation(sync)
        for given, name in [(sync, "SyncVectorEnv"), (wrapped, "NormalizeObservation")]:
            refused = f"^InGraphBatchEnv takes a batchrl BatchEnv, got {name}$"
            with pytest.raises(TypeError, match=refused):
                bridge.InGraphBatchEnv(given)


def test_an_env_exception_in_compiled_code_is_raised_as_itself():
    constructor = functools.partial(mock.FailingEnv, how="raise", at=2)
    with BatchEnv.external(constructor, 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)

        @bridge.surface_errors
        @jax.jit
        def two_steps(state):
            state, _ = env.step(state, jnp.zeros((2, 2)))
            return env.step(state, jnp.zeros((2, 2)))[0]

        state, _ = env.init(jax.random.key(0))
        with pytest.raises(errors.EnvRaisedError, match="FailingEnv failed on purpose in step"):
            two_steps(state)


def test_env_seconds_counts_the_time_spent_in_the_envs():
    constructor = functools.partial(mock.CountingEnv, step_seconds=0.01)
    with BatchEnv.external(constructor, 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        state, _ = env.init(jax.random.key(0))
        step = jax.jit(env.step)
        state, _ = jax.block_until_ready(step(state, jnp.zeros((2, 2))))  # Compiled.
        before, start = env.env_seconds, time.perf_counter()
        for _ in range(5):
            state, _ = step(state, jnp.zeros((2, 2)))
        jax.block_until_ready(state)
        assert 0.05 <= env.env_seconds - before <= time.perf_counter() - start


def test_an_interrupt_in_jaxs_part_of_a_host_call_is_raised_as_keyboard_interrupt():
    from jax.experimental.buffer_callback import buffer_callback

    def interrupted(ctx, out):
        raise KeyboardInterrupt("signal SIGTERM")  # As if it landed outside the bridge's code.

    call = buffer_callback(interrupted, jax.ShapeDtypeStruct((), np.int32), has_side_effect=True)
    with pytest.raises(KeyboardInterrupt, match="signal SIGTERM"):
        bridge.surface_errors(jax.jit(call))()


# A bridge built for the first of two CPU devices, given a program whose state is on the
# second; then the same program on a bridge built for the second.
_PLACED = """
import jax, jax.numpy as jnp
from batchrl import bridge, simulate
from batchrl.bridge import in_graph
from batchrl.envs import BatchEnv
from batchrl.testing import mock

first, second = jax.devices()
with BatchEnv.from_envs([mock.CountingEnv(3) for _ in range(2)]) as batch_env:
    for device in (first, second):
        env = bridge.InGraphBatchEnv(batch_env, device=device)
        zeros = jnp.zeros((2, *env.env_spec.action_shape))
        agent = simulate.Agent(
            lambda acting, mask: acting,
            lambda acting, obs, key: (acting, zeros, ()),
            lambda acting, transition, extra: (acting, extra),
            lambda acting, mask: acting,
        )
        with jax.default_device(second):
            state = jax.device_put(simulate.init(env, jax.random.key(0)), second)
        program = simulate.make_collect(env, agent, 4)
        try:
            state, _ = program(state, ())
            print("RAN ON", sorted(str(d) for d in state.done.devices()))
        except in_graph.DeviceError as error:
            print("REFUSED", str(error))
"""


def test_a_program_on_another_device_than_the_bridges_is_refused_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}
    done = subprocess.run(
        [sys.executable, "-c", _PLACED], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused, ran = done.stdout.splitlines()
    assert refused == (
        "REFUSED the env bridge steps its envs from programs on cpu:0, got an array on cpu:1: "
        "run acting there (--set acting_device=auto puts host envs on the CPU)"
    )
    assert ran == "RAN ON ['cpu:1']"

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import types
from batchrl.parts import memory

DURATIONS = (1, 2, 3, 4)
NUM_ENVS = len(DURATIONS)
NUM_STEPS = 12
MAX_LENGTH = 5
# Two memory shapes only, so each compiled function is built at most twice.
SMALL, LARGE = 8, 32


@flax.struct.dataclass
class Step:
    """A transition plus an extra field, as PPO stores the policy's log-prob beside it."""

    transition: types.Transition
    log_prob: jax.Array


def example():
    """One step of one env."""
    transition = types.Transition(
        obs=np.zeros((2,), np.float32),
        action=np.zeros((1,), np.float32),
        reward=np.zeros((), np.float32),
        terminated=np.zeros((), bool),
        truncated=np.zeros((), bool),
        next_obs=np.zeros((2,), np.float32),
    )
    return Step(transition=transition, log_prob=np.zeros((), np.float32))


def new_memory(capacity):
    return memory.init(example(), NUM_ENVS, capacity, MAX_LENGTH)


@jax.jit
def mock_step(t):
    """Global step t of the mock batch: env i ends every episode after DURATIONS[i] steps.

    obs is [t, k] with k the step within the episode; reward t + 1 and log_prob -(t + 1), so
    no stored value is zero and padding is told apart.
    """
    durations = jnp.asarray(DURATIONS, jnp.int32)
    k = t % durations
    done = k == durations - 1
    time = jnp.full(durations.shape, t, jnp.float32)
    obs = jnp.stack([time, k.astype(jnp.float32)], axis=1)
    transition = types.Transition(
        obs=obs,
        action=jnp.ones((NUM_ENVS, 1), jnp.float32),
        reward=time + 1.0,
        terminated=done,
        truncated=jnp.zeros_like(done),
        next_obs=obs + 1.0,
    )
    return Step(transition=transition, log_prob=-(time + 1.0)), done


def marked_step(value):
    """A step whose every leaf of env b holds value + b (bools: True)."""
    values = np.arange(NUM_ENVS, dtype=np.float32) + value

    def fill(leaf):
        column = values.reshape(-1, *[1] * leaf.ndim)
        return np.broadcast_to(column, (NUM_ENVS, *leaf.shape)).astype(leaf.dtype)

    return jax.tree.map(fill, example())


def tick(state, t):
    step, done = mock_step(t)
    state = memory.append(state, step)
    return memory.finish(state, done)


# Compiled once per shape and shared by the tests: eager dispatch compiles every small op.
jit_tick = jax.jit(tick)
append = jax.jit(memory.append)
replace = jax.jit(memory.replace)
finish = jax.jit(memory.finish)
clear = jax.jit(memory.clear)
valid_mask = jax.jit(memory.valid_mask)


def host(tree):
    """Numpy copies, so checks index them without dispatching JAX ops."""
    return jax.tree.map(np.asarray, tree)


def run(state, start, stop):
    """Ticks start..stop-1 from a Python loop, each one compiled on its own."""
    for t in range(start, stop):
        state = jit_tick(state, t)
    return state


def expected_episodes(num_steps):
    """(env, start, length) of every episode finished in num_steps, in storage order."""
    order = []
    for t in range(num_steps):
        for env, duration in enumerate(DURATIONS):
            if t % duration == duration - 1:
                order.append((env, t - duration + 1, duration))
    return order


def check_slot(state, slot, start, length):
    """Slot holds the mock episode that started at global step `start`, zero past `length`."""
    stored = host(state.memory)
    steps = np.arange(length)
    np.testing.assert_array_equal(stored.transition.obs[slot, :length, 0], start + steps)
    np.testing.assert_array_equal(stored.transition.obs[slot, :length, 1], steps)
    np.testing.assert_array_equal(stored.transition.reward[slot, :length], start + steps + 1)
    np.testing.assert_array_equal(stored.log_prob[slot, :length], -(start + steps + 1))
    np.testing.assert_array_equal(stored.transition.terminated[slot, :length], steps == length - 1)
    assert int(state.length[slot]) == length
    for leaf in jax.tree.leaves(stored):
        assert not np.any(leaf[slot, length:]), "padding must be zero"


def assert_zero(tree):
    for leaf in jax.tree.leaves(host(tree)):
        assert not np.any(leaf)


def test_init_shapes_and_dtypes():
    state = memory.init(example(), num_agents=4, capacity=5, max_length=6)
    assert state.episodes.transition.obs.shape == (4, 6, 2)
    assert state.episodes.transition.terminated.dtype == jnp.bool_
    assert state.memory.log_prob.shape == (5, 6)
    assert state.memory.transition.action.shape == (5, 6, 1)
    assert state.position.shape == (4,) and state.position.dtype == jnp.int32
    assert state.length.shape == (5,) and state.length.dtype == jnp.int32
    assert state.count.shape == () and state.count.dtype == jnp.int32
    assert not bool(memory.full(state))
    assert_zero(state)
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), example())
    from_structs = memory.init(structs, 4, 5, 6)
    assert jax.tree.map(jnp.shape, from_structs) == jax.tree.map(jnp.shape, state)
    with pytest.raises(ValueError, match="positive"):
        memory.init(example(), 4, 0, 6)


def test_bookkeeping_durations_1_2_3_4():
    order = expected_episodes(NUM_STEPS)
    assert len(order) == 12 + 6 + 4 + 3
    state = run(new_memory(LARGE), 0, 5)
    # After steps 0..4: env0 just ended; env1 ended at 3 and is 1 step in; env2 ended at 2 and
    # is 2 steps in; env3 ended at 3 and is 1 step in.
    np.testing.assert_array_equal(state.position, [0, 1, 2, 1])
    running = host(state.episodes)
    np.testing.assert_array_equal(running.transition.obs[2, :2, 0], [3, 4])
    np.testing.assert_array_equal(
        running.log_prob, np.array([[0] * 5, [-5, 0, 0, 0, 0], [-4, -5, 0, 0, 0], [-5, 0, 0, 0, 0]])
    )
    assert not np.any(running.transition.obs[2, 2:])
    state = run(state, 5, NUM_STEPS)
    assert int(state.count) == len(order)
    np.testing.assert_array_equal(state.position, [0, 0, 0, 0])
    assert_zero(state.episodes)
    for slot, (_, start, length) in enumerate(order):
        check_slot(state, slot, start, length)
    assert_zero(state.length[len(order) :])
    assert_zero(jax.tree.map(lambda x: x[len(order) :], state.memory))
    valid = np.zeros((LARGE, MAX_LENGTH), bool)
    for slot, (_, _, length) in enumerate(order):
        valid[slot, :length] = True
    np.testing.assert_array_equal(valid_mask(state), valid)
    assert not bool(memory.full(state))


def test_overflow_drops_extra_episodes():
    state = run(new_memory(SMALL), 0, 3)
    assert int(state.count) == 5 and not bool(memory.full(state))
    state = run(state, 3, NUM_STEPS)
    assert int(state.count) == SMALL and bool(memory.full(state))
    # Step 3 ends env0, env1, env3 and fills slots 5, 6, 7 exactly; later episodes are dropped.
    stored = [
        (0, 0, 1),
        (0, 1, 1),
        (1, 0, 2),
        (0, 2, 1),
        (2, 0, 3),
        (0, 3, 1),
        (1, 2, 2),
        (3, 0, 4),
    ]
    assert stored == expected_episodes(NUM_STEPS)[:SMALL]
    for slot, (_, start, length) in enumerate(stored):
        check_slot(state, slot, start, length)
    np.testing.assert_array_equal(state.position, [0, 0, 0, 0])
    np.testing.assert_array_equal(np.sum(valid_mask(state), axis=1), [1, 1, 2, 1, 3, 1, 2, 4])


def test_overflow_within_one_finish_keeps_env_order():
    state = new_memory(SMALL)
    first_three = np.array([True, True, True, False])
    for value in (10, 20):  # Slots 0..5: envs 0, 1, 2 twice.
        state = finish(append(state, marked_step(value)), first_three)
    assert int(state.count) == 6
    last_three = np.array([False, True, True, True])
    state = finish(append(state, marked_step(30), last_three), last_three)
    # Env1 takes slot 6, env2 slot 7; env3 finds no room and its episode is dropped.
    assert int(state.count) == SMALL
    np.testing.assert_array_equal(
        host(state.memory.log_prob)[:, 0], [10, 11, 12, 20, 21, 22, 31, 32]
    )
    np.testing.assert_array_equal(state.length, [1] * SMALL)
    np.testing.assert_array_equal(state.position, [0, 0, 0, 0])
    assert_zero(state.episodes)


def test_append_mask_and_empty_episodes():
    state = append(new_memory(SMALL), marked_step(10), np.array([True, False, True, False]))
    np.testing.assert_array_equal(state.position, [1, 0, 1, 0])
    np.testing.assert_array_equal(host(state.episodes.log_prob)[:, 0], [10, 0, 12, 0])
    state = append(state, marked_step(20), np.array([False, True, True, False]))
    np.testing.assert_array_equal(state.position, [1, 1, 2, 0])
    np.testing.assert_array_equal(
        host(state.episodes.log_prob)[:, :3], [[10, 0, 0], [21, 0, 0], [12, 22, 0], [0, 0, 0]]
    )
    # Env3 never wrote a step: its empty episode is not stored.
    state = finish(state, np.array([False, False, True, True]))
    assert int(state.count) == 1
    np.testing.assert_array_equal(state.length, [2, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(host(state.memory.log_prob)[0], [12, 22, 0, 0, 0])
    np.testing.assert_array_equal(state.position, [1, 1, 0, 0])


def test_clear():
    state = run(new_memory(SMALL), 0, 4)  # Full after step 3; env2 has 1 step running.
    assert bool(memory.full(state))
    running = host(state.episodes)
    kept = clear(state, False)  # As under a condition that does not hold.
    jax.tree.map(np.testing.assert_array_equal, host(kept), host(state))
    state = clear(state)
    assert int(state.count) == 0 and not bool(memory.full(state))
    assert_zero((state.length, valid_mask(state)))
    # Running episodes continue untouched and land in slots 0 onwards, each overwriting
    # its slot whole (zero past its length, where a longer episode was before).
    jax.tree.map(np.testing.assert_array_equal, host(state.episodes), running)
    state = run(state, 4, 6)  # Step 4 ends env0; step 5 ends env0, env1 and env2.
    assert int(state.count) == 4
    for slot, (start, length) in enumerate([(4, 1), (5, 1), (4, 2), (3, 3)]):
        check_slot(state, slot, start, length)


def test_truncation_at_max_length():
    only_env3 = np.array([False, False, False, True])
    state = new_memory(SMALL)
    for t in range(MAX_LENGTH + 2):
        state = append(state, mock_step(t)[0], only_env3)
    np.testing.assert_array_equal(state.position, [0, 0, 0, MAX_LENGTH])
    np.testing.assert_array_equal(host(state.episodes.log_prob)[3], [-1, -2, -3, -4, -5])
    state = finish(state, only_env3)
    assert int(state.count) == 1 and int(state.length[0]) == MAX_LENGTH
    np.testing.assert_array_equal(host(state.memory.transition.obs)[0, :, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(host(valid_mask(state))[0], [True] * MAX_LENGTH)
    np.testing.assert_array_equal(state.position, [0, 0, 0, 0])
    assert_zero(state.episodes)


def test_replace_overwrites_last_written_step():
    state = new_memory(SMALL)
    # env0: 1 step, env1: 2 steps, env2: 7 steps (kept 5), env3: none.
    for t in range(MAX_LENGTH + 2):
        state = append(state, mock_step(t)[0], np.array([t < 1, t < 2, True, False]))
    np.testing.assert_array_equal(state.position, [1, 2, MAX_LENGTH, 0])
    everywhere = np.ones(NUM_ENVS, bool)
    state = replace(state, everywhere, marked_step(100))
    np.testing.assert_array_equal(state.position, [1, 2, MAX_LENGTH, 0])
    log_prob = host(state.episodes.log_prob)
    np.testing.assert_array_equal(
        log_prob, [[100, 0, 0, 0, 0], [-1, 101, 0, 0, 0], [-1, -2, -3, -4, 102], [0] * 5]
    )
    np.testing.assert_array_equal(host(state.episodes.transition.truncated)[:, 1], [0, 1, 0, 0])
    state = replace(state, np.array([False, True, False, False]), marked_step(200))
    np.testing.assert_array_equal(host(state.episodes.log_prob)[:2, :2], [[100, 0], [-1, 201]])


def test_shape_errors():
    state = new_memory(SMALL)
    step = marked_step(0)
    with pytest.raises(ValueError, match="shape"):
        memory.append(state, jax.tree.map(lambda x: x[:3], step))
    with pytest.raises(ValueError, match="structure"):
        memory.append(state, step.transition)
    with pytest.raises(ValueError, match="mask"):
        memory.finish(state, np.ones(3, bool))


def test_jit_and_scan_match_eager():
    state = new_memory(SMALL)
    eager = state
    for t in range(6):  # Not compiled: every memory function runs op by op.
        step, done = mock_step(t)
        eager = memory.finish(memory.append(eager, step), done)
    jax.tree.map(np.testing.assert_array_equal, host(run(state, 0, 6)), host(eager))

    @jax.jit
    def scanned(state):
        def body(state, t):
            return tick(state, t), memory.full(state)

        return jax.lax.scan(body, state, jnp.arange(NUM_STEPS))

    compiled, full = scanned(state)
    jax.tree.map(np.testing.assert_array_equal, host(compiled), host(run(state, 0, NUM_STEPS)))
    # full() as seen before each step: counts run 1, 3, 5, 8 over steps 0..3.
    np.testing.assert_array_equal(full, np.arange(NUM_STEPS) > 3)


class Reference:
    """Plain-Python memory with the same rules; a step is a pair (obs [2], count)."""

    def __init__(self, num_agents, capacity, max_length):
        self.capacity, self.max_length = capacity, max_length
        self.running = [[] for _ in range(num_agents)]
        self.stored = []

    def append(self, steps, mask):
        for env, step in enumerate(steps):
            if mask[env] and len(self.running[env]) < self.max_length:
                self.running[env].append(step)

    def replace(self, steps, mask):
        for env, step in enumerate(steps):
            if mask[env] and self.running[env]:
                self.running[env][-1] = step

    def finish(self, mask):
        for env, done in enumerate(mask):
            if done:
                if self.running[env] and len(self.stored) < self.capacity:
                    self.stored.append(self.running[env])
                self.running[env] = []

    def clear(self):
        self.stored = []

    def arrays(self):
        """Padded arrays laid out as MemoryState's fields."""

        def pad(episodes, rows):
            obs = np.zeros((rows, self.max_length, 2), np.float32)
            count = np.zeros((rows, self.max_length), np.int32)
            for i, episode in enumerate(episodes):
                for t, (o, c) in enumerate(episode):
                    obs[i, t], count[i, t] = o, c
            return {"obs": obs, "count": count}

        lengths = [len(e) for e in self.stored] + [0] * (self.capacity - len(self.stored))
        return {
            "episodes": pad(self.running, len(self.running)),
            "position": np.array([len(e) for e in self.running], np.int32),
            "memory": pad(self.stored, self.capacity),
            "length": np.array(lengths, np.int32),
            "count": np.int32(len(self.stored)),
        }


def first_slots(memory, count):
    return jax.tree.map(lambda m: m[:count], memory)


def test_matches_reference_on_random_stream():
    num_agents, capacity, max_length, num_steps = 3, 5, 4, 120
    rng = np.random.default_rng(0)
    example_step = {"obs": np.zeros((2,), np.float32), "count": np.zeros((), np.int32)}
    state = memory.init(example_step, num_agents, capacity, max_length)
    reference = Reference(num_agents, capacity, max_length)

    @jax.jit
    def step(state, new, appended, fix, replaced, done, clear_now):
        state = memory.append(state, new, appended)
        state = memory.replace(state, replaced, fix)
        state = memory.finish(state, done)
        state = jax.lax.cond(clear_now, memory.clear, lambda s: s, state)
        return state, memory.full(state), memory.valid_mask(state)

    def random_steps(t, offset):
        obs = rng.normal(size=(num_agents, 2)).astype(np.float32)
        count = np.arange(num_agents, dtype=np.int32) + 10 * t + offset
        return {"obs": obs, "count": count}, [(obs[i], count[i]) for i in range(num_agents)]

    stored_total = 0
    for t in range(num_steps):
        new, new_list = random_steps(t, 1)
        fix, fix_list = random_steps(t, 5)
        appended = rng.random(num_agents) < 0.9
        replaced = rng.random(num_agents) < 0.2
        done = rng.random(num_agents) < 0.3
        clear_now = len(reference.stored) >= capacity and rng.random() < 0.5
        state, full, valid = step(state, new, appended, fix, replaced, done, clear_now)
        reference.append(new_list, appended)
        reference.replace(fix_list, replaced)
        reference.finish(done)
        if clear_now:
            stored_total += len(reference.stored)
            reference.clear()
        expected = reference.arrays()
        actual = {
            "episodes": state.episodes,
            "position": state.position,
            "memory": state.memory,
            "length": state.length,
            "count": state.count,
        }
        # Slots past count hold what they held before a clear; the reference's are zero.
        count = int(expected["count"])
        actual["memory"] = first_slots(host(actual["memory"]), count)
        expected["memory"] = first_slots(expected["memory"], count)
        jax.tree.map(np.testing.assert_array_equal, host(actual), expected)
        assert bool(full) == (len(reference.stored) >= capacity)
        expected_valid = np.arange(max_length)[None] < expected["length"][:, None]
        np.testing.assert_array_equal(valid, expected_valid)
    assert stored_total >= 3 * capacity, "the stream should fill and clear the memory repeatedly"

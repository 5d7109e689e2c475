import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.parts import episode_memory

DURATIONS = (1, 2, 3, 4)
NUM_ENVS = len(DURATIONS)
MAX_LENGTH = 5


def example():
    """One step of one env: an observation and a count, so every stored step is told apart."""
    return {"obs": np.zeros((2,), np.float32), "count": np.zeros((), np.int32)}


def host(tree):
    return jax.tree.map(np.asarray, tree)


@jax.jit
def tick(state, step, begin, done):
    """One batch step as the KL-penalty agent records it: begin, append, finish."""
    state = episode_memory.append(episode_memory.begin(state, begin), step)
    return episode_memory.finish(state, done)


class Reference:
    """Plain-Python memory with the module's rules; a step is a pair (obs [2], count)."""

    def __init__(self, num_envs, capacity, max_length):
        self.slots, self.capacity, self.max_length = capacity + num_envs, capacity, max_length
        self.episodes = [[] for _ in range(self.slots)]
        self.finished = [False] * self.slots
        self.slot = [None] * num_envs

    def finish(self, mask):
        for env, ended in enumerate(mask):
            if ended and self.slot[env] is not None:
                self.finished[self.slot[env]] = bool(self.episodes[self.slot[env]])
                self.slot[env] = None

    def begin(self, mask):
        self.finish(mask)
        running = {s for s in self.slot if s is not None}
        free = [s for s in range(self.slots) if not self.finished[s] and s not in running]
        for env, begins in enumerate(mask):
            if begins:
                self.slot[env] = free.pop(0) if free else None
                if self.slot[env] is not None:
                    self.episodes[self.slot[env]] = []

    def append(self, steps):
        for env, step in enumerate(steps):
            slot = self.slot[env]
            if slot is not None and len(self.episodes[slot]) < self.max_length:
                self.episodes[slot].append(step)

    def clear(self):
        self.finished = [False] * self.slots

    def check(self, state):
        """The memory holds exactly the reference's running and finished episodes."""
        state = host(state)
        np.testing.assert_array_equal(state.finished, self.finished)
        slots = [self.slots if s is None else s for s in self.slot]
        np.testing.assert_array_equal(state.slot, slots)
        assert int(state.count) == sum(self.finished)
        live = {s for s in self.slot if s is not None} | {
            s for s in range(self.slots) if self.finished[s]
        }
        for slot in live:
            episode = self.episodes[slot]
            assert int(state.length[slot]) == len(episode)
            for t, (obs, count) in enumerate(episode):
                np.testing.assert_array_equal(state.steps["obs"][slot, t], obs)
                assert int(state.steps["count"][slot, t]) == count
        valid = np.zeros((self.slots, self.max_length), bool)
        for slot in range(self.slots):
            if self.finished[slot]:
                valid[slot, : len(self.episodes[slot])] = True
        np.testing.assert_array_equal(episode_memory.valid_mask(state), valid)


def test_matches_the_reference_on_a_random_stream():
    num_envs, capacity, max_length, num_steps = 3, 5, 4, 150
    rng = np.random.default_rng(0)
    state = episode_memory.init(example(), num_envs, capacity, max_length)
    reference = Reference(num_envs, capacity, max_length)
    begin = np.ones(num_envs, bool)
    cleared = 0
    for t in range(num_steps):
        obs = rng.normal(size=(num_envs, 2)).astype(np.float32)
        count = np.arange(num_envs, dtype=np.int32) + 10 * t
        # Mostly episodes that end and begin anew; now and then a restart cuts one short.
        done = rng.random(num_envs) < 0.3
        cut = rng.random(num_envs) < 0.05
        state = tick(state, {"obs": obs, "count": count}, begin | cut, done)
        reference.begin(begin | cut)
        reference.append(list(zip(obs, count, strict=True)))
        reference.finish(done)
        reference.check(state)
        assert bool(episode_memory.full(state)) == (sum(reference.finished) >= capacity)
        if episode_memory.full(state) and rng.random() < 0.7:  # Sometimes left full a while.
            state = episode_memory.clear(state)
            reference.clear()
            cleared += 1
        begin = done
    assert cleared >= 10, "the stream should fill and clear the memory repeatedly"


def test_episodes_of_durations_1_2_3_4_fill_their_slots_in_env_order():
    state = episode_memory.init(example(), NUM_ENVS, 8, MAX_LENGTH)
    begin = np.ones(NUM_ENVS, bool)
    for t in range(4):
        within = t % np.asarray(DURATIONS)
        done = within == np.asarray(DURATIONS) - 1
        step = {"obs": np.stack([np.full(4, t), within], 1).astype(np.float32), "count": within}
        state = tick(state, step, begin, done)
        begin = done
    state = host(state)
    # Step 0: envs 0-3 take slots 0-3. Step 1: env 0 takes 4. Step 2: envs 0, 1 take 5, 6.
    # Step 3: envs 0, 2 take 7, 8; envs 0, 1 and 3 end.
    finished = np.flatnonzero(state.finished)
    lengths = {int(s): int(state.length[s]) for s in finished}
    assert lengths == {0: 1, 4: 1, 1: 2, 5: 1, 2: 3, 7: 1, 6: 2, 3: 4}
    assert int(state.count) == 8 and bool(episode_memory.full(state))
    np.testing.assert_array_equal(state.steps["obs"][3, :4, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(state.slot, [12, 12, 8, 12])  # Env 2 runs in slot 8.


def test_a_full_memory_leaves_new_episodes_without_a_slot():
    state = episode_memory.init(example(), 2, 1, MAX_LENGTH)  # Three slots.
    step = {"obs": np.ones((2, 2), np.float32), "count": np.ones(2, np.int32)}
    both = np.ones(2, bool)
    state = tick(state, step, both, both)  # Two finished: slots 0 and 1.
    state = tick(state, step, both, np.zeros(2, bool))  # One free slot, for env 0.
    np.testing.assert_array_equal(state.slot, [2, 3])
    state = episode_memory.finish(state, both)
    assert int(state.count) == 3
    np.testing.assert_array_equal(episode_memory.clear(state).finished, [False] * 3)


def test_truncation_keeps_the_first_max_length_steps():
    state = episode_memory.init(example(), 1, 1, 3)
    for t in range(5):
        step = {"obs": np.full((1, 2), t, np.float32), "count": np.full(1, t, np.int32)}
        state = tick(state, step, np.array([t == 0]), np.array([t == 4]))
    assert int(state.length[0]) == 3 and bool(state.finished[0])
    np.testing.assert_array_equal(state.steps["count"][0], [0, 1, 2])


def test_a_restart_finishes_the_running_episode_and_an_empty_one_keeps_nothing():
    state = episode_memory.init(example(), 1, 2, MAX_LENGTH)
    step = {"obs": np.ones((1, 2), np.float32), "count": np.ones(1, np.int32)}
    state = tick(state, step, np.array([True]), np.array([False]))
    state = episode_memory.begin(state, np.array([True]))  # Cut after one step: kept.
    assert int(state.count) == 1 and int(state.slot[0]) == 1
    state = episode_memory.finish(episode_memory.begin(state, np.array([True])), np.array([True]))
    assert int(state.count) == 1, "an episode with no step is not kept"


def test_shape_errors():
    state = episode_memory.init(example(), NUM_ENVS, 2, MAX_LENGTH)
    step = {"obs": np.zeros((NUM_ENVS, 2), np.float32), "count": np.zeros(NUM_ENVS, np.int32)}
    with pytest.raises(ValueError, match="shape"):
        episode_memory.append(state, jax.tree.map(lambda x: x[:3], step))
    with pytest.raises(ValueError, match="structure"):
        episode_memory.append(state, step["obs"])
    with pytest.raises(ValueError, match="mask"):
        episode_memory.finish(state, np.ones(3, bool))
    with pytest.raises(ValueError, match="must be positive"):
        episode_memory.init(example(), 0, 2, MAX_LENGTH)


def test_clear_touches_no_step_data_under_a_condition():
    state = episode_memory.init(example(), NUM_ENVS, 2, MAX_LENGTH)
    cleared = jax.jit(episode_memory.clear)(state, jnp.asarray(False))
    jax.tree.map(np.testing.assert_array_equal, host(cleared), host(state))

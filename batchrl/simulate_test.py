import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import bridge, simulate
from batchrl.conftest import wait_gone
from batchrl.envs import BatchEnv, EnvCrashedError, EnvRaisedError, EnvTimeoutError
from batchrl.envs.jax import classic, jax_env
from batchrl.testing import jax_mock, mock

DURATIONS = (1, 2, 3, 4)


@flax.struct.dataclass
class Counts:
    begin: jax.Array  # [B] begin_episode calls per env
    end: jax.Array  # [B] end_episode calls per env
    reward: jax.Array  # [B] reward summed over experience
    steps: jax.Array  # [] experience calls


def counting_agent(num_envs):
    """A mock algorithm: constant actions, and a count of every call per env."""

    def begin_episode(state, mask):
        return state.replace(begin=state.begin + mask)

    def perform(state, obs, key):
        del key
        return state, jnp.ones((obs.shape[0], 2), jnp.float32), ()

    def experience(state, transition, extra):
        state = state.replace(reward=state.reward + transition.reward, steps=state.steps + 1)
        return state, extra

    def end_episode(state, mask):
        return state.replace(end=state.end + mask)

    zeros = jnp.zeros((num_envs,), jnp.int32)
    initial = Counts(zeros, zeros, jnp.zeros((num_envs,), jnp.float32), jnp.zeros((), jnp.int32))
    return simulate.Agent(begin_episode, perform, experience, end_episode), initial


def expected_counts(num_steps, reset_at=()):
    """Plain-Python bookkeeping of the same episodes."""
    begin, end, reward, episodes, score_sum, length_sum = [], [], [], 0, 0.0, 0
    for duration in DURATIONS:
        steps, b, e, r, done = 0, 0, 0, 0.0, True
        for t in range(num_steps):
            if done or t in reset_at:
                steps, b, done = 0, b + 1, False
            steps += 1
            r += 2.0 + steps
            if steps == duration:
                e, done = e + 1, True
                episodes += 1
                score_sum += sum(2.0 + k for k in range(1, duration + 1))
                length_sum += duration
        begin.append(b), end.append(e), reward.append(r)
    return begin, end, reward, episodes, score_sum, length_sum


@pytest.fixture(params=["jax", "workers"])
def counting_env(request):
    if request.param == "jax":
        yield jax_mock.CountingBatch(DURATIONS)
        return
    constructors = [functools.partial(mock.CountingEnv, duration=d) for d in DURATIONS]
    with BatchEnv.external(constructors, envs_per_worker=2) as batch_env:
        yield bridge.InGraphBatchEnv(batch_env, seed=0)


def test_exact_episode_bookkeeping(counting_env):
    agent, agent_state = counting_agent(4)
    run = simulate.make_collect(counting_env, agent, 12)
    state = simulate.init(counting_env, jax.random.key(0))
    state, agent_state = run(state, agent_state)
    begin, end, reward, episodes, score_sum, length_sum = expected_counts(12)
    np.testing.assert_array_equal(agent_state.begin, begin)
    np.testing.assert_array_equal(agent_state.end, end)
    np.testing.assert_allclose(agent_state.reward, reward)
    assert int(agent_state.steps) == 12
    summary = simulate.summary(state)
    assert int(summary["episode/count"]) == episodes
    assert float(summary["episode/return"]) == pytest.approx(score_sum / episodes)
    assert float(summary["episode/length"]) == pytest.approx(length_sum / episodes)
    np.testing.assert_array_equal(state.done, [(12 % d) == 0 for d in DURATIONS])
    np.testing.assert_array_equal(state.obs[:, 0], [12 % d or d for d in DURATIONS])


def test_reset_flag_restarts_every_env(counting_env):
    agent, agent_state = counting_agent(4)
    run = simulate.make_collect(counting_env, agent, 5)
    state = simulate.init(counting_env, jax.random.key(0))
    state, agent_state = run(state, agent_state)
    state = simulate.clear_summary(state)
    state, agent_state = run(state, agent_state, True)
    begin, end, reward, _, _, _ = expected_counts(10, reset_at=(5,))
    np.testing.assert_array_equal(agent_state.begin, begin)
    np.testing.assert_array_equal(agent_state.end, end)
    np.testing.assert_allclose(agent_state.reward, reward)
    np.testing.assert_array_equal(state.length, [1, 1, 2, 1])


def test_first_episodes_keeps_each_envs_first_and_stops_once_all_ended(counting_env):
    agent, agent_state = counting_agent(4)
    run = simulate.make_first_episodes(counting_env, agent, 100)
    state = simulate.init(counting_env, jax.random.key(0))
    state, agent_state, first = run(state, agent_state)
    # The env of duration 1 ends four episodes while the longest ends its one; only the
    # first of each counts, and the loop stops at the step the longest one ends.
    np.testing.assert_array_equal(first.ended, [True] * 4)
    np.testing.assert_array_equal(first.length, DURATIONS)
    scores = [sum(2.0 + k for k in range(1, d + 1)) for d in DURATIONS]
    np.testing.assert_allclose(first.score, scores)
    assert int(agent_state.steps) == max(DURATIONS)
    # A second call restarts every env, mid-episode or not.
    state, agent_state, again = run(state, agent_state)
    np.testing.assert_array_equal(again.length, DURATIONS)
    assert int(agent_state.steps) == 2 * max(DURATIONS)


def test_first_episodes_stops_at_max_steps_and_marks_envs_that_did_not_end(counting_env):
    agent, agent_state = counting_agent(4)
    run = simulate.make_first_episodes(counting_env, agent, 2)
    state = simulate.init(counting_env, jax.random.key(0))
    state, agent_state, first = run(state, agent_state)
    np.testing.assert_array_equal(first.ended, [True, True, False, False])
    np.testing.assert_array_equal(first.length, [1, 2, 0, 0])
    assert int(agent_state.steps) == 2


def test_rollout_records_every_step_time_major(counting_env):
    agent, agent_state = counting_agent(4)
    state = simulate.init(counting_env, jax.random.key(0))
    run = counting_env.wrap_compiled(
        jax.jit(lambda s, a: simulate.rollout(counting_env, agent, s, a, 6))
    )
    _, _, records = run(state, agent_state)
    steps = np.asarray(records.transition.obs[:, :, 0])  # [T, B] step within the episode
    for env, duration in enumerate(DURATIONS):
        within = np.arange(6) % duration
        np.testing.assert_array_equal(steps[:, env], within)
        np.testing.assert_array_equal(records.begin[:, env], within == 0)
        np.testing.assert_array_equal(records.transition.terminated[:, env], within == duration - 1)
        np.testing.assert_array_equal(records.transition.next_obs[:, env, 0], within + 1)


def test_collect_stops_at_the_step_its_recorder_is_ready(counting_env):
    """A recorder that counts finished episodes stops collecting at the step the 5th ends."""
    agent, agent_state = counting_agent(4)
    recorder = simulate.Recorder(
        record=lambda ended, step: (
            ended + (step.transition.terminated | step.transition.truncated).sum()
        ),
        ready=lambda ended: ended >= 5,
    )

    def run(state, agent_state):
        return simulate.collect(
            counting_env, agent, state, agent_state, 12, recorder=recorder, storage=jnp.int32(0)
        )

    state = simulate.init(counting_env, jax.random.key(0))
    state, agent_state, ended, taken = counting_env.wrap_compiled(jax.jit(run))(state, agent_state)
    # Episodes end: step 1: env 0; step 2: envs 0, 1; step 3: envs 0, 2 -> 5 by step 3.
    assert int(taken) == 3 and int(ended) == 5 and int(agent_state.steps) == 3
    assert int(simulate.summary(state)["episode/count"]) == 5


@pytest.mark.parametrize(
    "mistake, message",
    [
        (
            {"perform": lambda state, obs, key: (state, jnp.ones((obs.shape[0], 2)))},
            "Agent.perform must return (acting, action, extra), a tuple of 3 whose acting is "
            "the acting state it was given (a Counts); got a tuple of 2",
        ),
        (
            {"perform": lambda state, obs, key: (jnp.ones((obs.shape[0], 2)), state, ())},
            "Agent.perform must return (acting, action, extra), a tuple of 3 whose acting is "
            "the acting state it was given (a Counts); got an array first",
        ),
        (
            {"experience": lambda state, transition, extra: state},
            "Agent.experience must return (acting, extra), a tuple of 2 whose acting is the "
            "acting state it was given (a Counts); got a Counts",
        ),
        (
            {"begin_episode": lambda state, mask: None},
            "Agent.begin_episode must return the acting state it was given (a Counts), of the "
            "same structure; got None (a missing return?)",
        ),
    ],
)
def test_an_agent_returning_the_wrong_things_is_named_in_one_line(counting_env, mistake, message):
    # An algorithm author's slip failed deep in simulate ("not enough values to unpack")
    # or in their own perform, on the None a begin_episode without `return` gave it.
    agent, agent_state = counting_agent(4)
    run = simulate.make_collect(counting_env, agent._replace(**mistake), 3)
    state = simulate.init(counting_env, jax.random.key(0))
    with pytest.raises(TypeError) as raised:
        run(state, agent_state)
    assert str(raised.value) == message
    state, agent_state = simulate.make_collect(counting_env, agent, 3)(state, agent_state)
    assert int(agent_state.steps) == 3  # The batch steps on with a mended agent.


def test_an_acting_state_that_is_a_pair_returned_alone_by_experience_is_named():
    # The pair alone has the length of the (acting, extra) experience must return.
    pair_agent = simulate.Agent(
        begin_episode=lambda pair, mask: pair,
        perform=lambda pair, obs, key: (pair, jnp.ones((obs.shape[0], 2)), ()),
        experience=lambda pair, transition, extra: (pair[0] + 1, pair[1]),
        end_episode=lambda pair, mask: pair,
    )
    env = jax_mock.CountingBatch(DURATIONS)
    run = simulate.make_collect(env, pair_agent, 3)
    with pytest.raises(TypeError, match=r"^Agent.experience .* got an array first"):
        run(simulate.init(env, jax.random.key(0)), (jnp.zeros(()), jnp.zeros(())))


def test_a_raw_key_starts_one_run_as_its_typed_key_does(counting_env):
    # jax.random.PRNGKey(0) is uint32 [2]: it was split as two runs' keys, and failed.
    raw = simulate.init(counting_env, jax.random.PRNGKey(0))
    typed = simulate.init(counting_env, jax.random.key(0))
    assert raw.episodes.shape == () and jax.random.key_data(raw.key).tolist() == (
        jax.random.key_data(typed.key).tolist()
    )


# An agent of no state that pushes a CartPole left at every step.
LEFT = simulate.Agent(
    begin_episode=lambda acting, mask: acting,
    perform=lambda acting, obs, key: (acting, jnp.zeros(obs.shape[:1], jnp.int32), ()),
    experience=lambda acting, transition, extra: (acting, extra),
    end_episode=lambda acting, mask: acting,
)


def test_stepping_worker_envs_from_an_older_state_is_refused_and_a_restart_mends_it():
    # Worker envs are not pure as JAX-native ones are: a state kept from before another
    # state's steps gave transitions from one episode's observation to another's.
    with BatchEnv.external("CartPole-v1", 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        rollout = jax.jit(lambda state, reset: simulate.rollout(env, LEFT, state, (), 3, reset))
        roll = env.wrap_compiled(rollout)
        train, _, _ = roll(simulate.init(env, jax.random.key(0)), False)
        evaluation, _, _ = roll(simulate.init(env, jax.random.key(1)), False)
        stale = r"not their newest \(of call 4, the envs are at call 8\)"
        with pytest.raises(bridge.StaleStateError, match=stale):
            roll(train, False)
        train, _, records = roll(train, True)  # Every env restarted: the state is theirs.
        assert (records.transition.next_obs[:-1] == records.transition.obs[1:]).all()
        with pytest.raises(bridge.StaleStateError):
            roll(evaluation, False)


def test_keys_of_several_runs_on_a_jax_native_batch_say_to_map_over_runs():
    # Split keys (R runs) failed inside jax.random.split: "split accepts a single key".
    env = jax_env.VmapBatch(classic.make("CartPole-v1"), 4)
    with pytest.raises(ValueError, match=r"got keys of shape \(3,\): map over runs"):
        simulate.init(env, jax.random.split(jax.random.key(0), 3))
    runs = jax.vmap(lambda key: simulate.init(env, key))(jax.random.split(jax.random.key(0), 3))
    assert runs.obs.shape == (3, 4, 4)


def test_a_jitted_function_tracing_one_env_and_given_anothers_state_is_refused():
    # A function that reads its env from a global keeps, once compiled, the env it was
    # first traced with: given the next env's state it stepped the first env's workers.
    envs = []

    @jax.jit
    def roll(state):
        return simulate.rollout(envs[-1], LEFT, state, (), 2)

    with BatchEnv.external("CartPole-v1", 2) as one, BatchEnv.external("CartPole-v1", 2) as two:
        envs.append(bridge.InGraphBatchEnv(one, seed=0))
        envs[-1].wrap_compiled(roll)(simulate.init(envs[-1], jax.random.key(0)))
        envs.append(bridge.InGraphBatchEnv(two, seed=1))
        with pytest.raises(bridge.StaleStateError, match="keeps the env it was first traced with"):
            envs[-1].wrap_compiled(roll)(simulate.init(envs[-1], jax.random.key(0)))


def test_env_steps_are_never_dropped_hoisted_or_reordered():
    with BatchEnv.external(functools.partial(mock.CountingEnv, duration=10**6), 2) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        agent, agent_state = counting_agent(2)

        def inner(carry, _):
            state, agent_state = carry
            state, agent_state, _ = simulate.rollout(env, agent, state, agent_state, 4)
            return (state, agent_state), None

        @jax.jit
        def scan_of_scans(state, agent_state, params):
            (state, agent_state), _ = jax.lax.scan(inner, (state, agent_state), None, length=3)
            # A gradient elsewhere in the same program, and the rollout's result unused.
            grad = jax.grad(lambda p: jnp.sum(jnp.sin(p) ** 2))(params)
            return state, grad

        state = simulate.init(env, jax.random.key(0))
        scan_of_scans = bridge.surface_errors(scan_of_scans)
        state, _ = scan_of_scans(state, agent_state, jnp.ones(3))
        np.testing.assert_array_equal(state.obs[:, 0], [12, 12])
        # Run again without using the result: the host envs still step 12 more times.
        scan_of_scans(state, agent_state, jnp.ones(3))
        obs, *_ = batch_env.step(np.zeros((2, 2), np.float32))
        np.testing.assert_array_equal(obs[:, 0], [25, 25])


@pytest.mark.parametrize(
    ("how", "error", "message"),
    [
        ("sigkill", EnvCrashedError, r"'FailingEnv' \(env 1.*died \(signal SIGKILL\)"),
        ("hang", EnvTimeoutError, r"'FailingEnv' \(env 1.*did not answer step within 1.0 s"),
    ],
)
def test_a_worker_crash_or_hang_in_a_compiled_rollout_raises_the_env_error(how, error, message):
    constructors = [mock.CountingEnv, functools.partial(mock.FailingEnv, how=how, at=3)]
    with BatchEnv.external(constructors, envs_per_worker=1, timeout=1.0) as batch_env:
        pids = [g.pid for g in batch_env._groups]
        env = bridge.InGraphBatchEnv(batch_env)
        agent, agent_state = counting_agent(2)
        run = simulate.make_collect(env, agent, 10)
        state = simulate.init(env, jax.random.key(0))
        with pytest.raises(error, match=message):
            run(state, agent_state)
    assert wait_gone(pids) == []


@pytest.mark.parametrize(
    ("how", "error", "message"),
    [
        (
            "raise",
            EnvRaisedError,
            r"failed on purpose in reset \(raised by env 'FailingEnv' \(env 1",
        ),
        ("sigkill", EnvCrashedError, r"'FailingEnv' \(env 1.*died \(signal SIGKILL\) during reset"),
    ],
)
def test_an_env_failing_in_its_first_reset_raises_the_env_error(how, error, message):
    failing = functools.partial(mock.FailingEnv, where="reset", how=how)
    with BatchEnv.external([mock.CountingEnv, failing], envs_per_worker=1) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        with pytest.raises(error, match=message):
            simulate.init(env, jax.random.key(0))


def test_a_compiled_rollout_goes_on_past_crashes_with_restart():
    constructors = [mock.CountingEnv, functools.partial(mock.FailingEnv, how="sigkill", at=3)]
    with BatchEnv.external(constructors, envs_per_worker=1, restart=True) as batch_env:
        env = bridge.InGraphBatchEnv(batch_env)
        agent, agent_state = counting_agent(2)
        run = simulate.make_collect(env, agent, 10)
        state = simulate.init(env, jax.random.key(0))
        state, agent_state = run(state, agent_state)
        assert batch_env.restarts >= 2  # Each fresh worker's env fails on its third step.
        assert int(agent_state.steps) == 10
        # The crashed env's episodes end every time its worker is replaced; env 0 runs on.
        assert int(agent_state.end[1]) >= 2 and int(agent_state.end[0]) == 3

"""simulate: one fused step of a batch of envs and an acting agent, and loops of it.

One step, as in the seed's simulate(): envs that finished on the previous step (or all,
when `reset` is set) are reset by mask and the agent's `begin_episode` is told which;
`perform` chooses the batch of actions; the env steps; `experience` receives the
transition and may add to what `perform` kept of its choice (the value of the next
observation, say); `end_episode` is told which envs finished. The step carries only the
acting state (policy parameters, normalisers, per-env episode state) and returns the
step's record; what learning needs is stored by a `Recorder` outside the step's blocks,
and the learner trains between loops (`collect` stops once the recorder is ready). The
same code runs on a JAX-native batch (`jax_env.VmapBatch`) and on worker processes
(`bridge.InGraphBatchEnv`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import agent_returns, records
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env

Acting = Any
Storage = Any


class CompiledBatch(Protocol):
    """What simulate needs of a batch of envs: pure functions on an explicit env state.

    `calls_host`: the env's functions call the host (worker processes). `block(f, *args)`
    runs the pure work of a step between host calls (one conditional on host envs, a
    plain call on JAX-native ones); `wrap_compiled(program)` makes a compiled program that
    steps the env raise the env's own errors (the program itself on JAX-native envs).
    """

    num_envs: int
    env_spec: EnvSpec
    calls_host: bool

    def init(self, key: jax.Array) -> tuple[Any, jax.Array]: ...

    def reset(
        self, env_state: Any, obs: jax.Array, key: jax.Array, mask: jax.Array
    ) -> tuple[Any, jax.Array]: ...

    def step(self, env_state: Any, action: jax.Array) -> tuple[Any, jax_env.TimeStep]: ...

    def block(self, function: Callable[..., Any], *args: Any) -> Any: ...

    def wrap_compiled(self, program: Callable[..., Any]) -> Callable[..., Any]: ...


class Agent(NamedTuple):
    """The acting side of an algorithm: pure functions on the acting state.

    Attributes:
        begin_episode: (acting, mask [B]) -> acting; mask marks envs starting anew.
        perform: (acting, obs [B, ...], key) -> (acting, action [B, ...], extra), where
            extra is what the step's record keeps of the choice (a pytree, leaves [B, ...]).
        experience: (acting, Transition, extra) -> (acting, extra): learns from the step
            and returns the extra the record keeps, changed or not (same structure).
        end_episode: (acting, mask [B]) -> acting; mask marks envs that finished.
    """

    begin_episode: Callable[[Acting, jax.Array], Acting]
    perform: Callable[[Acting, jax.Array, jax.Array], tuple[Acting, jax.Array, Any]]
    experience: Callable[[Acting, records.Transition, Any], tuple[Acting, Any]]
    end_episode: Callable[[Acting, jax.Array], Acting]


@flax.struct.dataclass
class StepRecord:
    """The record of one batch step, every leaf [B, ...].

    Attributes:
        transition: What the envs did.
        extra: What `perform` returned beside the action (log-probs, distributions), as
            `experience` passed it on.
        begin: [B] bool, the env's episode began at this step (transition.obs is its first).
    """

    transition: records.Transition
    extra: Any
    begin: jax.Array


class Recorder(NamedTuple):
    """Where a learner keeps batch steps, and when it has enough of them.

    Attributes:
        record: (storage, StepRecord) -> storage, writing the step in place.
        ready: storage -> [] bool, true once the learner should train on it.
    """

    record: Callable[[Storage, StepRecord], Storage]
    ready: Callable[[Storage], jax.Array]


@flax.struct.dataclass
class SimState:
    """The simulation's state: the envs, running episode stats, and finished-episode sums.

    Attributes:
        env_state: The batch's env state (a pytree).
        obs: Current observations, a tree of leaves [B, *leaf.shape].
        done: [B] bool, the env finished on the last step and is reset on the next.
        score: [B] float32 return of the running episode.
        length: [B] int32 steps of the running episode.
        key: Random key for resets and actions ([R], a key a run, where R runs share
            the batch in equal parts: `init`).
        episodes: [] int32 episodes finished since the last `clear_summary` ([R]: a run).
        score_sum: [] float32 sum of their scores ([R]).
        length_sum: [] float32 sum of their lengths ([R]).
    """

    env_state: Any
    obs: jax.Array
    done: jax.Array
    score: jax.Array
    length: jax.Array
    key: jax.Array
    episodes: jax.Array
    score_sum: jax.Array
    length_sum: jax.Array


def init(env: CompiledBatch, key: jax.Array) -> SimState:
    """Resets every env; the first step begins every episode.

    `key` [R], a key a run, makes the state of R runs whose host envs share the batch in
    equal parts: each run's keys and episode sums its own (`training.together`). A raw key
    (`jax.random.PRNGKey(0)`, uint32 [2]) is taken as the one typed key it holds.
    """
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):  # Not read as two runs.
        key = jax.random.wrap_key_data(key)
    key, reset_key = split(key, 2)
    env_state, obs = env.init(reset_key)
    num_envs = env.num_envs
    return SimState(
        env_state=env_state,
        obs=obs,
        done=jnp.ones((num_envs,), bool),  # So the first step tells begin_episode of all.
        score=jnp.zeros((num_envs,), jnp.float32),
        length=jnp.zeros((num_envs,), jnp.int32),
        key=key,
        episodes=jnp.zeros(key.shape, jnp.int32),
        score_sum=jnp.zeros(key.shape, jnp.float32),
        length_sum=jnp.zeros(key.shape, jnp.float32),
    )


def split(key: jax.Array, count: int) -> jax.Array:
    """`count` keys from `key`, [count], or from each of keys [R], [count, R]."""
    if key.ndim == 0:
        return jax.random.split(key, count)
    return jnp.swapaxes(jax.vmap(lambda one: jax.random.split(one, count))(key), 0, 1)


def per_run(values: jax.Array, runs: jax.Array) -> jax.Array:
    """Sums [B] `values` over each run's envs, shaped as `runs` ([] for one, [R] for R)."""
    return values.reshape((*runs.shape, -1)).sum(-1)


def step(
    env: CompiledBatch,
    agent: Agent,
    state: SimState,
    acting: Acting,
    reset: jax.Array | bool = False,
) -> tuple[SimState, Acting, StepRecord]:
    """One fused step of the batch and the agent. `reset` restarts every env first."""
    agent = agent_returns.checked(agent)  # A wrong return said in one line, at trace.

    def prepare(state: SimState, reset: jax.Array) -> tuple[jax.Array, ...]:
        keys = split(state.key, 3)
        reset_all = jnp.asarray(reset, bool)
        # Envs that only just began after init need no reset; the reset flag always resets.
        fresh = state.length == 0
        return keys, state.done | reset_all, (state.done & ~fresh) | reset_all

    (key, reset_key, act_key), begin, reset_mask = env.block(prepare, state, reset)
    env_state, obs = env.reset(state.env_state, state.obs, reset_key, reset_mask)

    def act(acting: Acting, obs: jax.Array) -> tuple[Acting, jax.Array, Any]:
        return agent.perform(agent.begin_episode(acting, begin), obs, act_key)

    acting, action, extra = env.block(act, acting, obs)
    env_state, time_step = env.step(env_state, action)

    def record(
        acting: Acting, extra: Any, time_step: jax_env.TimeStep
    ) -> tuple[SimState, Acting, StepRecord]:
        reward = time_step.reward.astype(jnp.float32)
        transition = records.Transition(
            obs=obs,
            action=action,
            reward=reward,
            terminated=time_step.terminated,
            truncated=time_step.truncated,
            next_obs=time_step.obs,
        )
        done = time_step.terminated | time_step.truncated
        acting, extra = agent.experience(acting, transition, extra)
        acting = agent.end_episode(acting, done)
        score = jnp.where(begin, 0.0, state.score) + reward
        length = jnp.where(begin, 0, state.length) + 1
        new_state = SimState(
            env_state=env_state,
            obs=time_step.obs,
            done=done,
            score=score,
            length=length,
            key=key,
            episodes=state.episodes + per_run(done.astype(jnp.int32), state.episodes),
            score_sum=state.score_sum + per_run(jnp.where(done, score, 0.0), state.episodes),
            length_sum=state.length_sum
            + per_run(jnp.where(done, length, 0), state.episodes).astype(jnp.float32),
        )
        return new_state, acting, StepRecord(transition=transition, extra=extra, begin=begin)

    return env.block(record, acting, extra, time_step)


def collect(
    env: CompiledBatch,
    agent: Agent,
    state: SimState,
    acting: Acting,
    num_steps: int | jax.Array,
    *,
    recorder: Recorder | None = None,
    storage: Storage = (),
    reset: jax.Array | bool = False,
    stepper: Callable[..., tuple[SimState, Acting, StepRecord]] | None = None,
) -> tuple[SimState, Acting, Storage, jax.Array]:
    """Fused steps until `num_steps` ran or the recorder is ready; `reset` restarts all first.

    Each step's record goes into `storage` through `recorder.record`, outside the step's
    blocks, so the storage is written in place and never crosses a conditional or a host
    call. `stepper(state, acting, reset)` takes a step in `step`'s place (one mapped over
    seeds, say). Returns the states, the storage and the number of steps taken ([] int32).
    """
    ready = (lambda storage: jnp.zeros((), bool)) if recorder is None else recorder.ready
    if stepper is None:
        stepper = functools.partial(step, env, agent)

    def running(carry: tuple) -> jax.Array:
        _, _, storage, taken = carry
        return (taken < num_steps) & ~ready(storage)

    def body(carry: tuple) -> tuple:
        state, acting, storage, taken = carry
        state, acting, record = stepper(state, acting, jnp.logical_and(reset, taken == 0))
        if recorder is not None:
            storage = recorder.record(storage, record)
        return state, acting, storage, taken + 1

    carry = (state, acting, storage, jnp.zeros((), jnp.int32))
    return jax.lax.while_loop(running, body, carry)


@flax.struct.dataclass
class FirstEpisodes:
    """Each env's first episode after a restart, every leaf [B].

    Attributes:
        ended: bool, the env ended an episode (its score and length below are that one's).
        score: float32 return of that episode, 0 where none ended.
        length: int32 steps of that episode, 0 where none ended.
    """

    ended: jax.Array
    score: jax.Array
    length: jax.Array


def first_episodes(
    env: CompiledBatch,
    agent: Agent,
    state: SimState,
    acting: Acting,
    max_steps: int | jax.Array,
    with_steps: bool = False,
) -> tuple[SimState, Acting, FirstEpisodes]:
    """Restarts every env and steps until each has ended one episode or `max_steps` ran.

    Only each env's first episode counts, so short episodes weigh no more than long ones
    (an env that fails fast would otherwise end several episodes while another ends one).
    `with_steps` adds the steps taken ([] int32) to what it returns.
    """

    def running(carry: tuple) -> jax.Array:
        _, _, first, taken = carry
        return (taken < max_steps) & ~first.ended.all()

    def body(carry: tuple) -> tuple:
        state, acting, first, taken = carry
        state, acting, _ = step(env, agent, state, acting, taken == 0)
        new = state.done & ~first.ended
        first = FirstEpisodes(
            ended=first.ended | state.done,
            score=jnp.where(new, state.score, first.score),
            length=jnp.where(new, state.length, first.length),
        )
        return state, acting, first, taken + 1

    none = FirstEpisodes(
        ended=jnp.zeros((env.num_envs,), bool),
        score=jnp.zeros((env.num_envs,), jnp.float32),
        length=jnp.zeros((env.num_envs,), jnp.int32),
    )
    carry = (state, acting, none, jnp.zeros((), jnp.int32))
    state, acting, first, taken = jax.lax.while_loop(running, body, carry)
    return (state, acting, first, taken) if with_steps else (state, acting, first)


def rollout(
    env: CompiledBatch,
    agent: Agent,
    state: SimState,
    acting: Acting,
    num_steps: int,
    reset: jax.Array | bool = False,
) -> tuple[SimState, Acting, StepRecord]:
    """`num_steps` fused steps in one `lax.scan`; their records time-major, [T, B, ...]."""

    def body(carry: tuple[SimState, Acting], index: jax.Array) -> tuple[tuple, StepRecord]:
        state, acting = carry
        state, acting, record = step(env, agent, state, acting, jnp.logical_and(reset, index == 0))
        return (state, acting), record

    (state, acting), records = jax.lax.scan(body, (state, acting), jnp.arange(num_steps))
    return state, acting, records


def make_collect(
    env: CompiledBatch, agent: Agent, num_steps: int
) -> Callable[[SimState, Acting, jax.Array | bool], tuple[SimState, Acting]]:
    """A compiled `collect` of `num_steps` with nothing recorded, returning once it has run.

    On an env that calls the host, an env worker's error is raised as itself.
    """

    def run(
        state: SimState, acting: Acting, reset: jax.Array | bool = False
    ) -> tuple[SimState, Acting]:
        state, acting, _, _ = collect(env, agent, state, acting, num_steps, reset=reset)
        return state, acting

    compiled = jax.jit(run)

    def finished(*args: Any, **kwargs: Any) -> tuple[SimState, Acting]:
        return jax.block_until_ready(compiled(*args, **kwargs))

    return env.wrap_compiled(finished)


def make_first_episodes(
    env: CompiledBatch, agent: Agent, max_steps: int
) -> Callable[[SimState, Acting], tuple[SimState, Acting, FirstEpisodes]]:
    """A compiled `first_episodes` of at most `max_steps`; returns and raises as `make_collect`."""

    def run(state: SimState, acting: Acting) -> tuple[SimState, Acting, FirstEpisodes]:
        return first_episodes(env, agent, state, acting, max_steps)

    compiled = jax.jit(run)

    def finished(state: SimState, acting: Acting) -> tuple[SimState, Acting, FirstEpisodes]:
        return jax.block_until_ready(compiled(state, acting))

    return env.wrap_compiled(finished)


@jax.jit
def summary(state: SimState) -> dict[str, jax.Array]:
    """Mean score and length of the episodes finished since the last `clear_summary`.

    One program, not an op each: the host reads it after every phase.
    """
    count = jnp.maximum(state.episodes, 1).astype(jnp.float32)
    return {
        "episode/count": state.episodes,
        "episode/return": jnp.where(state.episodes > 0, state.score_sum / count, jnp.nan),
        "episode/length": jnp.where(state.episodes > 0, state.length_sum / count, jnp.nan),
    }


def clear_summary(state: SimState) -> SimState:
    """Starts a new summary period."""
    return state.replace(
        episodes=jnp.zeros_like(state.episodes),
        score_sum=jnp.zeros_like(state.score_sum),
        length_sum=jnp.zeros_like(state.length_sum),
    )

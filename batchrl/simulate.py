"""simulate: one fused step of a batch of envs and an algorithm, and rollouts of it in lax.scan.

One step, as in the seed's simulate(): envs that finished on the previous step (or all,
when `reset` is set) are reset by mask and the algorithm's `begin_episode` is told
which; `perform` chooses the batch of actions; the env steps; `experience` receives the
transition; `end_episode` is told which envs finished, and may train the algorithm
inside the same compiled program. The same code runs on a JAX-native batch
(`jax_env.Batched`) and on worker processes (`bridge.InGraphBatchEnv`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import types
from batchrl.envs.jax import jax_env
from batchrl.types import EnvSpec

AgentState = Any


class BatchedEnv(Protocol):
    """What simulate needs of a batch of envs: pure functions on an explicit env state.

    An env whose functions call the host (worker processes) says so in
    `env_spec.calls_host`, and then also has `wrap_compiled(function) -> function`,
    which makes a compiled program that calls it raise the env's own errors.
    """

    num_envs: int
    env_spec: EnvSpec

    def init(self, key: jax.Array) -> tuple[Any, jax.Array]: ...

    def reset(
        self, env_state: Any, obs: jax.Array, key: jax.Array, mask: jax.Array
    ) -> tuple[Any, jax.Array]: ...

    def step(self, env_state: Any, action: jax.Array) -> tuple[Any, jax_env.TimeStep]: ...


class Agent(NamedTuple):
    """The algorithm's side of simulate: pure functions, state in and state out.

    Attributes:
        begin_episode: (agent_state, mask [B]) -> agent_state; mask marks envs starting anew.
        perform: (agent_state, obs [B, ...], key) -> (agent_state, action [B, ...]).
        experience: (agent_state, Transition) -> agent_state.
        end_episode: (agent_state, mask [B]) -> agent_state; mask marks envs that finished.
    """

    begin_episode: Callable[[AgentState, jax.Array], AgentState]
    perform: Callable[[AgentState, jax.Array, jax.Array], tuple[AgentState, jax.Array]]
    experience: Callable[[AgentState, types.Transition], AgentState]
    end_episode: Callable[[AgentState, jax.Array], AgentState]


@flax.struct.dataclass
class State:
    """The simulation's state: the envs, running episode stats, and finished-episode sums.

    Attributes:
        env_state: The batch's env state (a pytree).
        obs: [B, *obs_shape] current observations.
        done: [B] bool, the env finished on the last step and is reset on the next.
        score: [B] float32 return of the running episode.
        length: [B] int32 steps of the running episode.
        key: Random key for resets and actions.
        episodes: [] int32 episodes finished since the last `clear_summary`.
        score_sum: [] float32 sum of their scores.
        length_sum: [] float32 sum of their lengths.
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


def init(env: BatchedEnv, key: jax.Array) -> State:
    """Resets every env; the first step begins every episode."""
    key, reset_key = jax.random.split(key)
    env_state, obs = env.init(reset_key)
    num_envs = env.num_envs
    return State(
        env_state=env_state,
        obs=obs,
        done=jnp.ones((num_envs,), bool),  # So the first step tells begin_episode of all.
        score=jnp.zeros((num_envs,), jnp.float32),
        length=jnp.zeros((num_envs,), jnp.int32),
        key=key,
        episodes=jnp.zeros((), jnp.int32),
        score_sum=jnp.zeros((), jnp.float32),
        length_sum=jnp.zeros((), jnp.float32),
    )


def _as_one_block(
    env: BatchedEnv, always: jax.Array, function: Callable[..., Any], *args: Any
) -> Any:
    """`function(*args)` inside a conditional whose predicate is always true at run time.

    XLA's CPU runtime runs independent operations of a loop body concurrently on its
    thread pool. When the body also calls the host (worker envs), every hand-off between
    threads is slow; grouped into one conditional, the pure part of a step is a single
    node, and the body runs in order on one thread, several times faster per step
    (docs/benchmarks.md, "Simulate on worker envs").
    Both branches are the same function, so the result
    never depends on the predicate. JAX-native envs, with no host calls, skip it.
    """
    if not env.env_spec.calls_host:
        return function(*args)
    return jax.lax.cond(always, function, function, *args)


def step(
    env: BatchedEnv,
    agent: Agent,
    state: State,
    agent_state: AgentState,
    reset: jax.Array | bool = False,
) -> tuple[State, AgentState]:
    """One fused step of the batch and the agent. `reset` restarts every env first."""
    always = state.episodes >= 0  # True, but not provably so to the compiler.

    def prepare(state: State, reset: jax.Array) -> tuple[jax.Array, ...]:
        keys = jax.random.split(state.key, 3)
        reset_all = jnp.asarray(reset, bool)
        # Envs that only just began after init need no reset; the reset flag always resets.
        fresh = state.length == 0
        return keys, state.done | reset_all, (state.done & ~fresh) | reset_all

    (key, reset_key, act_key), begin, reset_mask = _as_one_block(env, always, prepare, state, reset)
    env_state, obs = env.reset(state.env_state, state.obs, reset_key, reset_mask)

    def act(agent_state: AgentState, obs: jax.Array) -> tuple[AgentState, jax.Array]:
        agent_state = agent.begin_episode(agent_state, begin)
        return agent.perform(agent_state, obs, act_key)

    agent_state, action = _as_one_block(env, always, act, agent_state, obs)
    env_state, time_step = env.step(env_state, action)

    def learn(agent_state: AgentState, time_step: jax_env.TimeStep) -> tuple[State, AgentState]:
        reward = time_step.reward.astype(jnp.float32)
        transition = types.Transition(
            obs=obs,
            action=action,
            reward=reward,
            terminated=time_step.terminated,
            truncated=time_step.truncated,
            next_obs=time_step.obs,
        )
        agent_state = agent.experience(agent_state, transition)
        done = time_step.terminated | time_step.truncated
        score = jnp.where(begin, 0.0, state.score) + reward
        length = jnp.where(begin, 0, state.length) + 1
        agent_state = agent.end_episode(agent_state, done)
        new_state = State(
            env_state=env_state,
            obs=time_step.obs,
            done=done,
            score=score,
            length=length,
            key=key,
            episodes=state.episodes + done.sum(dtype=jnp.int32),
            score_sum=state.score_sum + jnp.where(done, score, 0.0).sum(),
            length_sum=state.length_sum + jnp.where(done, length, 0).sum().astype(jnp.float32),
        )
        return new_state, agent_state

    return _as_one_block(env, always, learn, agent_state, time_step)


def rollout(
    env: BatchedEnv,
    agent: Agent,
    state: State,
    agent_state: AgentState,
    num_steps: int,
    reset: jax.Array | bool = False,
) -> tuple[State, AgentState]:
    """`num_steps` fused steps in one `lax.scan`; `reset` restarts every env at the first."""

    def body(carry: tuple[State, AgentState], index: jax.Array) -> tuple[Any, None]:
        state, agent_state = carry
        return step(env, agent, state, agent_state, jnp.logical_and(reset, index == 0)), None

    (state, agent_state), _ = jax.lax.scan(body, (state, agent_state), jnp.arange(num_steps))
    return state, agent_state


def make_rollout(
    env: BatchedEnv, agent: Agent, num_steps: int
) -> Callable[[State, AgentState, jax.Array | bool], tuple[State, AgentState]]:
    """A compiled rollout of `num_steps` that returns once it has run.

    On an env that calls the host, an env worker's error is raised as itself.
    """

    def run(
        state: State, agent_state: AgentState, reset: jax.Array | bool = False
    ) -> tuple[State, AgentState]:
        return rollout(env, agent, state, agent_state, num_steps, reset)

    compiled = jax.jit(run)

    @functools.wraps(run)
    def finished(*args: Any, **kwargs: Any) -> tuple[State, AgentState]:
        return jax.block_until_ready(compiled(*args, **kwargs))

    return env.wrap_compiled(finished) if env.env_spec.calls_host else finished


def summary(state: State) -> dict[str, jax.Array]:
    """Mean score and length of the episodes finished since the last `clear_summary`."""
    count = jnp.maximum(state.episodes, 1).astype(jnp.float32)
    return {
        "episode/count": state.episodes,
        "episode/return": jnp.where(state.episodes > 0, state.score_sum / count, jnp.nan),
        "episode/length": jnp.where(state.episodes > 0, state.length_sum / count, jnp.nan),
    }


def clear_summary(state: State) -> State:
    """Starts a new summary period."""
    return state.replace(
        episodes=jnp.zeros_like(state.episodes),
        score_sum=jnp.zeros_like(state.score_sum),
        length_sum=jnp.zeros_like(state.length_sum),
    )

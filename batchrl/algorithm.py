"""The algorithm protocol: what the training loop and a loaded policy call of an objective.

An algorithm is a record of pure functions on its agent state, as `simulate.Agent` is of
acting. The agent state is a pytree with two fields the shell reads:

- `learner`: all that acting reads (parameters, normalisers) and all a trained policy
  is; a checkpoint's `agent.learner` is what `batchrl.load` restores.
- `storage`: what the recorder writes as the envs step (an episode memory, a rollout
  buffer); sized before it is allocated.

A train phase (`training.phase`) runs stretches of acting, each ending when the recorder
is ready: `cut` the episodes a restart ends, `learn` (trains when the storage is ready),
`begin` the acting state, the sampling agent steps the envs while the recorder writes
the storage, `end` takes back what acting changed. With overlap (`training.overlap`),
`learn` runs on the ready storage while acting writes into its `clear`ed copy. Evaluation
runs the evaluation agent from `begin`; `metrics` and `check_finite` read the learner after a phase.

Each algorithm config type names its algorithm as `module:attribute` (its `algorithm`
class attribute, beside its `objective` name in `ppo.config.OBJECTIVES`, the one table
of objectives); `of(config)` imports it when a run first needs it, so reading configs
never imports JAX.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.env_spec import EnvSpec

AgentState = Any  # The agent state: a pytree with `learner` and `storage`.
Networks = Any  # The algorithm's static networks for one env, with `config` and `env_spec`.
Learner = Any  # The agent state's `learner`.


class Shares(NamedTuple):
    """How an algorithm's acting splits over envs acting apart in shares, and joins back.

    Rollout actors (`training.rollout_actors`) each act on a share of the batch's envs
    for a segment: they are sent the `shared` part once and their envs' rows of the
    per-env part; each sends back what its segment changed, joined into one acting state.

    Attributes:
        split: acting -> (shared, per_env): what every share reads alike (parameters,
            normalisers), and each env's state, leaves [B, ...].
        combine: (shared, per_env) -> acting, for a share's envs.
        returned: acting -> what a share sends back after its segment: its envs' state
            and the statistics its steps gathered, nothing it was sent alike.
        join: (acting, [returned]) -> acting: the state the segment began with, then each
            share's returns in the order of their envs, as one batch's segment ends.
        storage_axis: the env axis of the storage's leaves of a higher rank (a rollout's
            [T, B, ...]: 1); the lower-rank leaves are alike in every share.
    """

    split: Callable[[simulate.Acting], tuple[Any, Any]]
    combine: Callable[[Any, Any], simulate.Acting]
    returned: Callable[[simulate.Acting], Any]
    join: Callable[[simulate.Acting, list[Any]], simulate.Acting]
    storage_axis: int


class Algorithm(NamedTuple):
    """An objective as the loop drives it; B is the number of envs stepped together.

    Attributes:
        networks: (config, env_spec) -> networks: the static description of the policy
            and value networks for an env's spaces.
        init: (networks, shape, key) -> state: a fresh agent for a run of `shape`
            (`ppo.config.RunShape`: envs, longest episode, budget); a ValueError when the
            config cannot train it.
        recorder: networks -> simulate.Recorder writing the storage.
        cut: (state, when []) -> state: ends every running episode in the storage where
            `when` holds (all envs restart).
        learn: (networks, state, behind=False) -> state: an update when the storage is
            ready, else the state as it was; `behind`: the storage was acted by an older
            policy than the learner's (`training.overlap`).
        clear: (networks, state) -> state: the storage emptied as `learn` empties a ready
            one, untrained; what acting writes while an update of the ready storage runs
            beside it (`training.overlap`).
        holds_steps: state -> [] bool: whether the storage holds steps a later update
            reads; where not (an emptied rollout buffer), a checkpoint leaves it out.
        begin: state -> acting: the acting state of a stretch of steps.
        end: (state, acting, storage) -> state: the state after a stretch, with what acting
            changed and the storage it wrote.
        acting: (networks, learner, B) -> acting: a fresh acting state for B envs that
            start their episodes, for a loaded policy.
        sampling_agent: networks -> simulate.Agent that samples actions and keeps what the
            recorder stores.
        evaluation_agent: (networks, sample=False) -> simulate.Agent that takes the mode of
            the policy's distribution (a sample of it with `sample`) and learns nothing.
        metrics: (networks, learner) -> {name: [] array}: the last update's metrics and
            summaries (those of normalisers the config applies).
        update_metrics: the names among `metrics` that an update writes: a phase's row
            holds them only when an update trained in the phase (before the first, they
            are zeros; after it, the last update's again).
        updates: learner -> [] int array: the updates trained so far ([N] for N stacked
            learners).
        check_finite: (learner, metrics, env_steps) -> None: a FloatingPointError naming
            every non-finite quantity.
        shares: how its acting splits over rollout actors (`Shares`); None where it
            cannot (an episode memory fills at a step that every env decides together).
    """

    networks: Callable[[Any, EnvSpec], Networks]
    init: Callable[[Networks, Any, jax.Array], AgentState]
    recorder: Callable[[Networks], simulate.Recorder]
    cut: Callable[[AgentState, jax.Array], AgentState]
    learn: Callable[..., AgentState]
    clear: Callable[[Networks, AgentState], AgentState]
    holds_steps: Callable[[AgentState], jax.Array]
    begin: Callable[[AgentState], simulate.Acting]
    end: Callable[[AgentState, simulate.Acting, simulate.Storage], AgentState]
    acting: Callable[[Networks, Learner, int], simulate.Acting]
    sampling_agent: Callable[[Networks], simulate.Agent]
    evaluation_agent: Callable[..., simulate.Agent]
    metrics: Callable[[Networks, Learner], dict[str, jax.Array]]
    update_metrics: tuple[str, ...]
    updates: Callable[[Learner], jax.Array]
    check_finite: Callable[[Learner, dict[str, float], int], None]
    shares: Shares | None = None


def init_shapes(algorithm: Algorithm, networks: Networks, shape: Any) -> AgentState:
    """The shapes and dtypes of `algorithm.init`'s fresh agent: traced, not compiled.

    For what needs only those: the storage's size, an example learner for a checkpoint
    to fill, an empty storage (`zeros` of its part).
    """
    return shapes_of(functools.partial(algorithm.init, networks, shape))


def shapes_of(init: Callable[[jax.Array], AgentState]) -> AgentState:
    """The shapes and dtypes of the agent `init(key)` makes, traced and not compiled.

    JAX keeps the trace with the function: `jax.jit(init)` called after traces nothing
    again, where an equal function of its own would (a second or more a run's start).
    """
    key = jax.eval_shape(jax.random.key, 0)  # Its type alone: a key made here compiles.
    return jax.eval_shape(init, key)


def zeros(shapes: Any) -> Any:
    """Zeros (random keys of zero data) of a tree of shapes and dtypes, made by one program.

    Made op by op, each leaf's shape and dtype compiled a program of its own.
    """
    return jax.jit(lambda: jax.tree.map(jnp.zeros_like, shapes))()


def of(config: Any) -> Algorithm:
    """The algorithm that trains `config`, an algorithm config (its type's `algorithm`)."""
    module, _, attribute = type(config).algorithm.partition(":")
    return getattr(importlib.import_module(module), attribute)

"""A rollout actor: a Ray actor that acts on its share of a run's envs with its own programs.

It builds envs first.. first + count - 1 of the run's batch where it runs (worker
processes on its node, the MuJoCo batch, Atari's games and their evaluation games, a
JAX-native batch), each seeded as in the whole batch, and compiles two programs on
them: acting for a segment, writing its share of the rollout, and an evaluation round.
Its networks sample, and its JAX-native envs reset, with the noise and keys the whole
batch would give its rows, so a batch acted in shares acts as it does whole. The
learner (`training.rollout_actors`) sends the acting parameters and each call's state;
the actor sends back whole segments, as host arrays.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import simulate
from batchrl.envs.ray import raylet_watch
from batchrl.training import environments


def to_host(tree: Any) -> Any:
    """`tree` with its arrays as numpy arrays, random keys kept as keys (Ray pickles both)."""

    def host(leaf: Any) -> Any:
        return np.asarray(leaf) if isinstance(leaf, jax.Array) and not is_key(leaf) else leaf

    return jax.tree.map(host, tree)


def is_key(leaf: Any) -> bool:
    """Whether `leaf` is an array of typed random keys, which NumPy cannot hold."""
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


class RolloutActor:
    """Envs first.. first + count - 1 of the batch a pickled (config, env) names, acting.

    `replaced`: this actor replaces one lost that many times; its host envs are seeded as
    a worker's after as many restarts (`lifecycle.restart_seed`).
    """

    def __init__(self, blob: bytes, first: int, count: int, replaced: int = 0):
        raylet_watch.end_with_raylet()
        self._batch_env = self._eval_batch_env = None
        self._failure: Exception | None = None
        try:
            self._build(blob, first, count, replaced)
        except Exception as error:  # An env that fails on this node, a module missing here.
            # Raised by `describe`: an actor whose __init__ raised reports only "died",
            # after Ray prints its traceback on the learner's terminal.
            self._failure = error
            self.close()

    def _build(self, blob: bytes, first: int, count: int, replaced: int) -> None:
        """The envs, networks and programs of `__init__`."""
        config, env = cloudpickle.loads(blob)
        self.first, self.count = first, count
        share = (first, count)
        self._env, self._batch_env = environments.build(
            config, env=env, share=share, replaced=replaced
        )
        # Atari's evaluation plays whole games on envs of its own; others step these.
        evaluation = environments.build_eval(config, share=share, replaced=replaced)
        self._eval_env, self._eval_batch_env = evaluation or (self._env, None)
        algorithm = algorithm_lib.of(config.algorithm)
        self._shares = algorithm.shares
        networks = algorithm.networks(config.trained_algorithm, self._env.env_spec)
        networks = dataclasses.replace(networks, rows=(first, config.num_envs))
        sampling = algorithm.sampling_agent(networks)
        evaluation = algorithm.evaluation_agent(networks, sample=config.eval_sample)
        recorder = algorithm.recorder(networks)
        shape = dataclasses.replace(config.shape, num_envs=count)
        self._empty = empty_storage(algorithm, networks, shape)
        env_, eval_env = self._env, self._eval_env

        def act(sim: Any, acting: Any, storage: Any, left: jax.Array, reset: jax.Array) -> tuple:
            sim, acting, storage, taken = simulate.collect(
                env_, sampling, sim, acting, left, recorder=recorder, storage=storage, reset=reset
            )
            return sim, acting, storage, taken, recorder.ready(storage)

        def evaluate(sim: Any, acting: Any, max_steps: jax.Array) -> tuple:
            return simulate.first_episodes(
                eval_env, evaluation, sim, acting, max_steps, with_steps=True
            )

        def advance(sim: Any, acting: Any, steps: jax.Array) -> tuple:
            sim, acting, _, _ = simulate.collect(eval_env, evaluation, sim, acting, steps)
            return sim, acting

        self._act = env_.wrap_compiled(jax.jit(act))
        self._evaluate = eval_env.wrap_compiled(jax.jit(evaluate))
        self._advance = eval_env.wrap_compiled(jax.jit(advance))
        self._held: tuple[Any, Any] | None = None  # An eval round's states, to advance.

    def describe(self) -> tuple:
        """Where the actor runs and its envs' spec; raises what stopped it building them."""
        import ray

        if self._failure is not None:
            raise self._failure
        return ray.get_runtime_context().get_node_id(), os.getpid(), self._env.env_spec

    def alive(self) -> bool:
        """True: the learner's probe, answered while a call runs (`actor_answers`)."""
        return True

    def init(self, key: jax.Array, evaluation: bool = False) -> tuple:
        """Every env reset, as `simulate.CompiledBatch.init`: (env_state, obs).

        `evaluation`: the envs evaluation steps, where they are others (Atari's games).
        """
        env = self._eval_env if evaluation else self._env
        env_state, obs = env.init(key)
        return to_host((_rows_of(env, env_state), obs))

    def act(
        self, shared: Any, running: Any, storage: Any, sim: Any, left: int, reset: bool
    ) -> tuple:
        """A segment: at most `left` steps, until the rollout share is ready.

        `shared` and `running` are the acting state's shared part and this actor's rows of
        its per-env part (`algorithm.Shares`); `storage` this actor's share of the
        learner's (None: the learner's holds no steps, and the actor writes into an
        empty one of its own). Returns what the segment changed of the acting state
        (`Shares.returned`), the storage, the simulation, the steps taken and whether
        the storage is ready.
        """
        storage = self._empty if storage is None else storage
        acting = self._shares.combine(shared, running)
        sim, acting, storage, taken, ready = self._act(
            _sim_in(self._env, sim),
            acting,
            storage,
            jnp.asarray(left, jnp.int32),
            jnp.asarray(reset),
        )
        sim = _sim_out(self._env, sim)
        return to_host((self._shares.returned(acting), storage, sim, taken, ready))

    def evaluate(self, shared: Any, running: Any, sim: Any, max_steps: int) -> tuple:
        """An evaluation round from a restart: (sim, first episodes, steps taken)."""
        acting = self._shares.combine(shared, running)
        sim, acting, first, taken = self._evaluate(
            _sim_in(self._eval_env, sim), acting, jnp.asarray(max_steps, jnp.int32)
        )
        self._held = (sim, acting)
        return to_host((_sim_out(self._eval_env, sim), first, taken))

    def advance(self, steps: int) -> Any:
        """The last round's simulation `steps` steps on, as the whole batch's round runs."""
        sim, acting = self._held
        sim, _ = self._advance(sim, acting, jnp.asarray(steps, jnp.int32))
        return to_host(_sim_out(self._eval_env, sim))

    def restarts(self) -> int:
        """Env workers replaced in this actor."""
        return 0 if self._batch_env is None else self._batch_env.restarts

    def close(self) -> None:
        """Closes the actor's envs and their workers."""
        for batch_env in (self._batch_env, self._eval_batch_env):
            if batch_env is not None:
                batch_env.close()
        self._batch_env = self._eval_batch_env = None


def empty_storage(
    algorithm: algorithm_lib.Algorithm, networks: algorithm_lib.Networks, shape: Any
) -> Any:
    """An empty share of the storage, whose rows are written before they are read.

    Zeros of the shapes `algorithm.init` gives it (`algorithm.zeros`), init traced but not
    compiled (a second or more of an actor's start): the clipped objective, the one
    rollout actors run, starts its storage as zeros, at position 0.
    """
    shapes = algorithm_lib.init_shapes(algorithm, networks, shape)
    return algorithm_lib.zeros(shapes.storage)


def _rows_of(env: Any, env_state: Any) -> Any:
    """`env_state` as shares join it by rows (Atari's handle on every row: `state_rows`)."""
    rows = getattr(env, "state_rows", None)
    return env_state if rows is None else rows(env_state)


def _sim_in(env: Any, sim: simulate.SimState) -> simulate.SimState:
    """A simulation from the learner, its env state as `env` takes it."""
    unrows = getattr(env, "state_of_rows", None)
    return sim if unrows is None else sim.replace(env_state=unrows(sim.env_state))


def _sim_out(env: Any, sim: simulate.SimState) -> simulate.SimState:
    """A simulation for the learner, its env state joinable by rows."""
    return sim.replace(env_state=_rows_of(env, sim.env_state))


def rows(tree: Any, lo: int, hi: int, axis: int = 0) -> Any:
    """Rows lo..hi - 1 along `axis` of every leaf of rank above `axis`; the rest shared."""
    index = (slice(None),) * axis + (slice(lo, hi),)
    return jax.tree.map(lambda x: x[index] if np.ndim(x) > axis else x, tree)


def join_rows(parts: Sequence[Any], axis: int = 0) -> Any:
    """The parts joined along `axis` at every leaf of rank above it; the first's elsewhere.

    Random keys (a gymnax env's state keeps one an env) stay keys, joined by JAX: NumPy
    cannot hold them.
    """

    def join(*leaves: Any) -> Any:
        if np.ndim(leaves[0]) <= axis:
            return leaves[0]
        if is_key(leaves[0]):
            return jnp.concatenate(leaves, axis=axis)
        return np.concatenate(leaves, axis=axis)

    return jax.tree.map(join, *parts)

"""Rollout actors: a run's envs in Ray actors, each acting on its share; the learner here.

With `rollout_actors=N` the run's envs are split evenly over N Ray actors
(`training.rollout_actor`), one to a node in turn. A segment of acting (until the rollout
is full, or the phase's steps are done) is one Ray call per actor, not one per batch step:
the learner puts the acting parameters and normalisers in Ray's object store once, every
actor reads them, acts on its envs with its own compiled program and returns its share of
the rollout, [T, B_i, ...], whole. The learner joins the shares and updates, on its own
device, between segments, as `phase.split` does between its acting and learning devices.

The same results as the envs stepped here, within float error, for the same seed: every
env is seeded as in the whole batch, each actor samples the noise the whole batch samples
for its envs, the normalisers take in a segment's statistics at its end
(`normalizer_updates="segment"`, which the local run then uses too), and an evaluation
round steps every actor as long as the whole batch's round steps. The clipped objective
only: an episode memory fills at a step that all envs' episodes decide.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import simulate
from batchrl.bridge import xla_threads
from batchrl.configs import TrainConfig
from batchrl.envs.host import errors, lifecycle
from batchrl.envs.ray import ray_group
from batchrl.training import actor_answers, actor_shares, placement, rollout_actor
from batchrl.training.rollout_actor import join_rows, rows

logger = logging.getLogger("batchrl.training")

START_TIMEOUT = 300.0  # Seconds an actor may take to build its envs and answer.


class RolloutEnv:
    """The learner's handle on N rollout actors holding a run's `num_envs` envs.

    To `simulate.init` and the run it is a batch of host envs (`init` resets every env
    in the actors); its phases are `train_program`'s and `eval_program`'s, which run
    in the actors. `close` ends every actor and the envs they hold.
    """

    device = jax.devices("cpu")[0]  # Where the simulation's state waits between calls.

    def __init__(self, config: TrainConfig, env: Any = None):
        ray = ray_group.import_ray()
        # Host envs are one set, which train and eval phases share and restart, as here;
        # JAX-native ones are their simulation's state, one for each.
        self.calls_host = not config.jax_native
        self.num_envs = config.num_envs
        self._eval_apart = config.backend == "ale"  # `environments.build_eval`'s games.
        count = config.rollout_actors
        self.bounds = [config.num_envs * k // count for k in range(count + 1)]
        self._sims = actor_shares.SimShares(self._ranges)  # Each actor's own host-call count.
        self._restart = config.restart_workers
        self._timeout = config.worker_timeout  # A silent actor's, as a worker's (`_get`).
        self.replaced = [0] * count  # Each actor's replacements so far.
        self._actors: list[Any] = []
        self._closed = False
        ray_group.SESSION.join()  # Ray's processes, if it starts them, on every core; then
        self._cores = xla_threads.pin_thread()  # the learner's work on `learner_cores`.
        try:
            alive = ray_group.alive_nodes()
            self.nodes = [alive[number % len(alive)] for number in range(count)]
            remote = ray.remote(concurrency_groups=actor_answers.PROBE_GROUPS)
            self._remote = remote(rollout_actor.RolloutActor)
            self._blob = cloudpickle.dumps((config, env))
            self._actors = [self._launch(number) for number in range(count)]
            described = self._get([actor.describe.remote() for actor in self._actors], "start")
        except BaseException:
            self.close()
            raise
        self.nodes = [node for node, _, _ in described]
        self.env_spec = described[0][2]

    def _launch(self, number: int) -> Any:
        """Actor `number` on its node; a replacement on any live node if that one is gone."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        replaced = self.replaced[number]
        strategy = NodeAffinitySchedulingStrategy(self.nodes[number], soft=replaced > 0)
        options = {"num_cpus": 0, "max_restarts": 0, "scheduling_strategy": strategy}
        lo, hi = self._ranges[number]
        return self._remote.options(**options).remote(self._blob, lo, hi - lo, replaced)

    def _replace(self, number: int, error: Exception) -> None:
        """Replaces lost actor `number`: its envs reseeded, as a restarted worker's are.

        One lost as it starts (on a node that died abruptly, which Ray still listed as
        live) is replaced in turn, up to `lifecycle.RESTART_TRIES` times.
        """
        ray = ray_group.import_ray()
        for tries_left in reversed(range(lifecycle.RESTART_TRIES)):
            with contextlib.suppress(Exception):
                ray.kill(self._actors[number], no_restart=True)
            self.replaced[number] += 1
            logger.warning("%s; replacement %d of this actor", error, self.replaced[number])
            self._actors[number] = self._launch(number)
            try:
                (described,) = self._get([self._actors[number].describe.remote()], "start", number)
                self.nodes[number] = described[0]
                return
            except errors.EnvCrashedError as lost:
                if not tries_left:
                    raise
                error = lost

    # -- what simulate and the run read of a batch --------------------------------------------

    def init(self, key: jax.Array, evaluation: bool = False) -> tuple[Any, Any]:
        """Resets every env in the actors: the whole batch's (env_state, obs).

        `evaluation`: the envs evaluation steps, where they are others (`eval_games`).
        """

        def send(number: int, lost: bool = False) -> Any:
            return self._actors[number].init.remote(key, evaluation)

        parts = self._call("init", send)
        self._sims.keep([env_state for env_state, _ in parts], evaluation and self._eval_apart)
        return join_rows(parts)

    def eval_games(self) -> EvalGames | None:
        """The actors' evaluation envs (Atari's whole games), or None: the training envs."""
        return EvalGames(self) if self._eval_apart else None

    @staticmethod
    def wrap_compiled(program: Callable[..., Any]) -> Callable[..., Any]:
        return program

    @property
    def restarts(self) -> int:
        """Actors replaced, and env workers replaced in those now; a lost one the next call's."""
        workers = 0
        lost = (errors.EnvCrashedError, errors.EnvTimeoutError) if self._restart else ()
        for number, ref in enumerate([actor.restarts.remote() for actor in self._actors]):
            with contextlib.suppress(*lost):  # Every actor asked at once, answers read in turn.
                workers += self._get([ref], "restarts", number)[0]
        return sum(self.replaced) + workers

    def close(self) -> None:
        """Closes every actor's envs, then ends the actors. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        ray = ray_group.import_ray()
        with contextlib.suppress(Exception):
            ray.get([actor.close.remote() for actor in self._actors], timeout=30)
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        ray_group.SESSION.leave()
        if self._cores:
            os.sched_setaffinity(0, self._cores)

    def __enter__(self) -> RolloutEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the programs ---------------------------------------------------------------------

    def train_program(
        self,
        networks: algorithm_lib.Networks,
        algorithm: algorithm_lib.Algorithm,
        num_steps: int,
        where: placement.Placement,
        overlap: bool = False,
    ) -> Callable[..., tuple[simulate.SimState, algorithm_lib.AgentState]]:
        """A train phase of `num_steps` batch steps: segments in the actors, updates here.

        Called as `phase.make`'s programs are: (state, agent, reset=False, settle=False).
        With `overlap` the actors act each segment with the parameters from before the
        update that the learner trains meanwhile (`training.overlap`'s schedule), a Ray
        call being answered while the learner works; an update left pending at the end
        of a phase runs beside the next phase's first segment, or at once when `settle`.
        """
        shares = algorithm.shares
        recorder = algorithm.recorder(networks)

        @jax.jit
        def prepare(agent: Any, cut: jax.Array) -> tuple[Any, jax.Array]:
            agent = algorithm.cut(agent, cut)
            return agent, recorder.ready(agent.storage)

        @jax.jit
        def detach(agent: Any) -> tuple[Any, Any, jax.Array]:
            """Acting's state, and the agent with its storage emptied where it is ready."""
            cleared = algorithm.clear(networks, agent)
            return algorithm.begin(agent), cleared, algorithm.holds_steps(cleared)

        learn = jax.jit(lambda agent: algorithm.learn(networks, agent, behind=overlap))
        end = jax.jit(algorithm.end)
        compiled = {}  # The update, compiled once; with overlap, while the actors act.

        def learner(agent: Any) -> Callable[[Any], Any]:
            if "learn" not in compiled:
                compiled["learn"] = learn.lower(agent).compile()
            return compiled["learn"]

        def run(
            state: simulate.SimState, agent: Any, reset: Any = False, settle: bool = False
        ) -> tuple[simulate.SimState, Any]:
            reset, left = bool(reset), num_steps
            agent, pending = prepare(agent, where.to_learner(jnp.asarray(reset)))
            pending, sims = bool(pending), self._sims.scatter(state)
            while left > 0:
                if pending and not overlap:
                    agent = learner(agent)(agent)
                acting, cleared, holds = detach(agent)
                send = self._segment(
                    algorithm, acting, cleared, holds, sims, left, reset and left == num_steps
                )
                calls = [send(number) for number in range(len(self._actors))]
                if overlap:  # The pending update, or else its compilation, while they act.
                    update = learner(agent)
                    agent = jax.block_until_ready(update(agent)) if pending else agent
                parts = self._answers("act", send, calls)
                returns, storages, sims, taken, ready = zip(*parts, strict=True)
                acting = shares.join(acting, list(returns))
                storage = join_rows(storages, shares.storage_axis)
                agent = end(agent, *where.to_learner((acting, storage)))
                left, pending = left - int(taken[0]), bool(ready[0])
            if pending and (settle or not overlap):
                agent = learner(agent)(agent)
            return jax.block_until_ready((self._sims.gather(sims), agent))

        return run

    def _segment(
        self,
        algorithm: algorithm_lib.Algorithm,
        acting: Any,
        agent: Any,
        holds: jax.Array,
        sims: Sequence[simulate.SimState],
        left: int,
        first: bool,
    ) -> Callable[..., Any]:
        """`send(number, lost=False)` for a segment acted from `acting` into `agent`'s storage."""
        ray = ray_group.import_ray()
        shared, running = rollout_actor.to_host(algorithm.shares.split(acting))
        stored = rollout_actor.to_host(agent.storage) if bool(holds) else None
        segment = (ray.put(shared), running, stored, sims, left, first)
        cut = functools.partial(algorithm.cut, agent)
        return functools.partial(self._act, segment, cut, algorithm.shares.storage_axis)

    def _act(
        self,
        segment: tuple,
        cut: Callable[[jax.Array], Any],
        axis: int,
        number: int,
        lost: bool = False,
    ) -> Any:
        """Sends actor `number` its segment (shared, running, stored, sims, left, first).

        A replacement for a `lost` actor starts its envs anew at the segment's first step,
        and the episodes they ran end as truncated at the storage's last step (`cut`).
        """
        shared, running, stored, sims, left, first = segment
        lo, hi = self._ranges[number]
        share = None if stored is None else rows(stored, lo, hi, axis)
        if lost and share is not None:
            mask = np.zeros(self.num_envs, bool)
            mask[lo:hi] = True
            share = rows(rollout_actor.to_host(cut(jnp.asarray(mask)).storage), lo, hi, axis)
        args = (shared, rows(running, lo, hi), share, sims[number], left, first or lost)
        return self._actors[number].act.remote(*args)

    def eval_program(
        self, algorithm: algorithm_lib.Algorithm, max_steps: int
    ) -> Callable[..., tuple[simulate.SimState, Any, simulate.FirstEpisodes]]:
        """An evaluation round (`simulate.make_first_episodes`'s) in the actors.

        Each actor stops once its envs ended their first episodes, and then steps on to
        the step where the last env of the whole batch ended its, as one batch would.
        """
        ray = ray_group.import_ray()

        def run(state: simulate.SimState, acting: Any) -> tuple:
            shared, running = rollout_actor.to_host(algorithm.shares.split(acting))
            shared = ray.put(shared)
            starts = self._sims.scatter(state, self._eval_apart)

            def evaluate(number: int, lost: bool = False) -> Any:
                lo, hi = self._ranges[number]
                actor = self._actors[number]
                return actor.evaluate.remote(
                    shared, rows(running, lo, hi), starts[number], max_steps
                )

            sims, firsts, taken = zip(*self._call("evaluate", evaluate), strict=True)
            last = max(int(steps) for steps in taken)
            behind = [k for k, steps in enumerate(taken) if int(steps) < last]
            calls = {k: self._actors[k].advance.remote(last - int(taken[k])) for k in behind}
            sims = list(sims)
            for k, call in calls.items():  # Each failure named by its actor's number.
                (sims[k],) = self._get([call], "evaluate", k)
            return self._sims.gather(sims, self._eval_apart), acting, join_rows(firsts)

        return run

    # -- plumbing -------------------------------------------------------------------------

    @property
    def _ranges(self) -> list[tuple[int, int]]:
        return list(itertools.pairwise(self.bounds))

    def _call(self, command: str, send: Callable[..., Any]) -> list[Any]:
        """Every actor's answer to `send(number)`, a Ray call to it."""
        return self._answers(command, send, [send(number) for number in range(len(self._actors))])

    def _answers(self, command: str, send: Callable[..., Any], refs: list[Any]) -> list[Any]:
        """Each actor's answer to its call in `refs`, which `send(number)` made.

        With `restart_workers`, a lost actor is replaced and sent `send(number, lost=True)`
        once; otherwise, and if that fails too, one line names it.
        """
        answers = []
        for number, ref in enumerate(refs):
            try:
                (answer,) = self._get([ref], command, number)
            except (errors.EnvCrashedError, errors.EnvTimeoutError) as error:
                if not self._restart:
                    raise
                self._replace(number, error)
                (answer,) = self._get([send(number, lost=True)], command, number)
            answers.append(answer)
        return answers

    def _get(self, refs: list[Any], command: str, first: int = 0) -> list[Any]:
        """Actors `first`, `first` + 1, ...'s answers, or one line naming one that failed."""
        ray = ray_group.import_ray()
        answers = []
        for number, ref in enumerate(refs, first):
            actor = self._actors[number]  # A probe would wait for __init__, building envs.
            probe = None if command == "start" else actor.alive.options(concurrency_group="probe")
            try:
                timeout = START_TIMEOUT if probe is None else self._timeout
                answers.append(actor_answers.answer(ref, probe, timeout))
            except ray.exceptions.RayTaskError as error:
                where = self._describe(number)
                raise actor_answers.raised_in(error, where, command) from None
            except actor_answers.HungError:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
                where, restart = self._describe(number), self._restart
                raise actor_answers.hung(where, command, self._timeout, restart) from None
            except (ray.exceptions.RayError, TimeoutError) as error:
                why = type(error).__name__
                if number < len(self.nodes) and self.nodes[number] not in ray_group.alive_nodes():
                    why = f"{why}; its node is gone"
                where, restart = self._describe(number), self._restart
                raise actor_answers.lost(where, command, why, restart) from None
        return answers

    def _describe(self, number: int) -> str:
        lo, hi = self._ranges[number]
        on = f" on node {self.nodes[number][:8]}" if number < len(self.nodes) else ""
        return f"rollout actor {number} (envs {lo}-{hi - 1}){on}"


class EvalGames:
    """The evaluation envs in a `RolloutEnv`'s actors (which run its rounds), as a batch."""

    calls_host = True
    device = RolloutEnv.device

    def __init__(self, env: RolloutEnv):
        self._env = env
        self.num_envs, self.env_spec = env.num_envs, env.env_spec

    def init(self, key: jax.Array) -> tuple[Any, Any]:
        return self._env.init(key, evaluation=True)

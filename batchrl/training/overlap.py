"""Overlap: the envs act for the next update while the learner trains on the last.

Without overlap the envs wait while the learner trains and the learner waits while
they step. With it, a train phase runs as programs the host drives (`phase.split`'s),
and each time the storage is ready its update runs in a thread of its own while acting
goes on into the storage's `clear`ed copy, with the parameters from before that update:
the acting policy is one version behind the learner's, as an actor one update behind
its learner is in Cleanba. Two programs dispatched from one thread run one after the
other on XLA's CPU; from two threads they run at once.

What the lag changes:
- The clipped objective's ratio is taken against the log-probs stored while acting
  (`clipped.Rollout.log_prob`), so it corrects for the lag as for any update's own
  steps; its clip is about the acting policy too, so an update may step further from
  the learner's own policy than without the lag (`cheetah_clipped`: KL 0.12-0.14 an
  update against 0.016-0.019; docs/training.md, "What overlap does to learning").
  Advantages use values recomputed under the learner's parameters at the update,
  fresher than acting's by one update; the bootstrap values at truncations and at the
  rollout's last row are acting's, as without overlap.
- The penalty objective's ratio is taken against the stored distributions too, but its
  KL against the learner's own policy at the update's start (`penalty.update`'s
  `behind`): the step its adaptive coefficient sizes, with no lag in it. Its episode
  memory keeps running episodes in their slots: the update reads the finished ones while
  acting writes the running ones into the cleared copy.
- Normalisers run on with acting; an update reads them as acting left them at the end of
  the stretch it trains on, as without overlap.

A phase that ends with its storage ready leaves the update pending in the agent state:
the next phase runs it beside its first stretch, so a phase of one update overlaps too.
The run's last phase (`settle`) trains it before returning. Each phase remains a pure
function of its state, so a run killed and resumed equals the uninterrupted one.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from batchrl import algorithm as algorithm_lib
from batchrl import simulate
from batchrl.configs import TrainConfig
from batchrl.training import placement


def wanted(config: TrainConfig, env: simulate.CompiledBatch, where: placement.Placement) -> bool:
    """Whether a run of `config` on `env`, placed `where`, overlaps: "on", "off" or "auto".

    "auto" overlaps where it measured faster: envs the host steps (worker processes, the
    MuJoCo batch, ALE, Ray) acting on the CPU while the learner runs on an accelerator
    (on one H200, `cheetah_clipped` 1.37x, `humanoid_clipped` 1.26x), and rollout actors,
    which act in processes of their own, on any learner (on one 2-core machine, in
    phases of one update between a run's first and last: `cartpole` 1.06-1.16x,
    `cheetah_clipped` 0.998-1.13x, `benchmarks/ray_training.py`). Where acting runs on
    the accelerator too (JAX-native envs, Atari through ale-py's GPU target), the two
    programs take turns on it (`breakout`: 3.9k env steps/s either way); on a CPU the
    envs and the learner share its cores, and which wins depends on the env (2 cores,
    `benchmarks/core_scaling.py`: `cheetah_clipped` on the MuJoCo batch 1.06-1.25x,
    `pendulum` on workers 1.09x, the seed's `cheetah` on workers 0.88x).
    """
    if config.overlap == "auto":
        if hasattr(env, "train_program"):  # Rollout actors (`training.rollout_actors`).
            return True
        accelerated = where.learner.platform != "cpu"
        return env.calls_host and where.acting.platform == "cpu" and accelerated
    return config.overlap == "on"


def make(
    env: simulate.CompiledBatch,
    networks: algorithm_lib.Networks,
    num_steps: int,
    where: placement.Placement,
) -> Callable[..., tuple[simulate.SimState, algorithm_lib.AgentState]]:
    """The overlapped phase of `num_steps` batch steps: (state, agent, reset, settle) -> both.

    `reset` restarts every env at the first step; `settle` trains a storage left ready at
    the end, so the agent returned holds every update (the run's last phase).
    """
    algorithm = algorithm_lib.of(networks.config)
    sampling = algorithm.sampling_agent(networks)
    recorder = algorithm.recorder(networks)
    to_acting = where.to_acting if where.split else (lambda tree: tree)
    to_learner = where.to_learner if where.split else (lambda tree: tree)

    @jax.jit
    def prepare(agent: Any, cut: jax.Array) -> tuple[Any, jax.Array]:
        agent = algorithm.cut(agent, cut)
        return agent, recorder.ready(agent.storage)

    @jax.jit
    def detach(agent: Any) -> tuple[simulate.Acting, simulate.Storage]:
        return algorithm.begin(agent), algorithm.clear(networks, agent).storage

    learn = jax.jit(lambda agent: algorithm.learn(networks, agent, behind=True))
    end = jax.jit(algorithm.end)

    @jax.jit
    def act(state: Any, acting: Any, storage: Any, left: jax.Array, reset: jax.Array) -> tuple:
        state, acting, storage, taken = simulate.collect(
            env, sampling, state, acting, left, recorder=recorder, storage=storage, reset=reset
        )
        return state, acting, storage, taken, recorder.ready(storage)

    act = env.wrap_compiled(act)

    compiled = {}  # The update, compiled once: beside the first stretch, which has none.

    def compile_learn(agent: Any) -> Callable[[Any], Any]:
        if "learn" not in compiled:
            compiled["learn"] = learn.lower(agent).compile()
        return compiled["learn"]

    def trained(agent: Any) -> Any:
        return jax.block_until_ready(compile_learn(agent)(agent))

    def run(
        state: simulate.SimState,
        agent: algorithm_lib.AgentState,
        reset: Any = False,
        settle: bool = False,
    ) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
        reset, left = bool(reset), num_steps
        agent, pending = prepare(agent, to_learner(jnp.asarray(reset)))
        pending = bool(pending)
        with concurrent.futures.ThreadPoolExecutor(1, "batchrl-learner") as learner:
            while left > 0:
                acting, storage = detach(agent)
                # The pending update, or else the update's compilation, runs beside acting.
                updating = pending
                update = learner.submit(trained if updating else compile_learn, agent)
                state, acting, storage, taken, pending = act(
                    state,
                    *to_acting((acting, storage)),
                    to_acting(jnp.asarray(left, jnp.int32)),
                    to_acting(jnp.asarray(reset and left == num_steps)),
                )
                learned = update.result()
                agent = learned if updating else agent
                agent = end(agent, *to_learner((acting, storage)))
                left, pending = left - int(taken), bool(pending)
        if settle and pending:
            agent = trained(agent)
        return jax.block_until_ready((state, agent))

    return run

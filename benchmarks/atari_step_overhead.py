"""Per batch step of Atari games, the cost of stepping them from a compiled rollout, two ways.

Prints one JSON line. For each batch size, in the same run and alternating rounds, it
times per batch step of Breakout with fixed actions:
  python:   ale-py's AtariVectorEnv.step called from a Python loop (the games' own cost);
  ffi:      simulate.rollout through `AleFfiBatch`: ale-py's XLA FFI calls in the program;
  callback: simulate.rollout through `InGraphBatchEnv`: the bridge's host callback into
            Python, then BatchEnv.atari's step of the same games;
  ffi_plain: ffi without AleFfiBatch's grouping of a step's pure work into conditionals
            between the calls (`one_block`, as the bridge does): XLA schedules it.
Overhead = rollout - python. Every figure is a median over rounds, the overheads and the
ratio of each round's own differences and ratios: a round's paths run seconds apart,
so a loaded machine's drift moves them less than the totals. The callback's overhead is
also given from within its own runs: total minus the time its host calls spent in the
BatchEnv (`InGraphBatchEnv.env_seconds`). XLA runs on one thread (`xla_threads.limit()`,
as training does for host envs) unless --xla-threads is given. The same figures in CPU
time (`cpu_*`: every thread of the process, the games' included) move less with the
machine's load than wall time does, since other processes' work is not counted.

    python benchmarks/atari_step_overhead.py [--steps 100] [--rounds 21] [--sizes 8 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from ale_py.vector_env import AtariVectorEnv

from batchrl import bridge, simulate
from batchrl.bridge import ale_ffi, xla_threads
from batchrl.envs import BatchEnv
from batchrl.envs.jax import jax_env

GAME = "breakout"
ACTION = 1  # FIRE: the ball is served, lives are lost, games end and reset.


class PlainFfiEnv(ale_ffi.AleFfiBatch):
    """AleFfiBatch with a step's pure work left to XLA's scheduling, as on JAX-native envs."""

    block = staticmethod(jax_env.Compiled.block)


def fixed_agent() -> simulate.Agent:
    """Plays ACTION in every env; keeps no state."""

    def perform(agent_state, obs, key):
        del key
        return agent_state, jnp.full((obs.shape[0],), ACTION, jnp.int32), ()

    def same(agent_state, _):
        return agent_state

    return simulate.Agent(same, perform, lambda s, transition, extra: (s, extra), same)


def compiled_rollout(env, steps: int):
    """A jitted `simulate.rollout` of `steps` fixed actions, returning the state after it."""
    agent = fixed_agent()
    run = jax.jit(lambda state: simulate.rollout(env, agent, state, (), steps)[0])
    return env.wrap_compiled(lambda state: jax.block_until_ready(run(state)))


def measure(num_envs: int, steps: int, rounds: int) -> dict:
    vector_env = AtariVectorEnv(GAME, num_envs)
    batches = [BatchEnv.atari(GAME, num_envs) for _ in range(3)]
    try:
        callback_env = bridge.InGraphBatchEnv(batches[1], seed=0)
        envs = {
            "ffi": ale_ffi.AleFfiBatch(batches[0], seed=0),
            "callback": callback_env,
            "ffi_plain": PlainFfiEnv(batches[2], seed=0),
        }
        states = {name: simulate.init(env, jax.random.key(0)) for name, env in envs.items()}
        rollouts = {name: compiled_rollout(env, steps) for name, env in envs.items()}
        vector_env.reset(seed=0)
        actions = np.full(num_envs, ACTION, np.int32)

        def run_python():
            for _ in range(steps):
                vector_env.step(actions)  # Games that ended reset at their next step.

        def runner(name):
            def run():
                states[name] = rollouts[name](states[name])

            return run

        runs = {"python": run_python, **{name: runner(name) for name in envs}}
        for run in runs.values():  # Compiles, and warms the games up.
            run()
        rows = []  # Per round: seconds per batch step of each path, and the callback's env.
        for round_ in range(rounds):
            row = {}
            names = list(runs)[round_ % len(runs) :] + list(runs)[: round_ % len(runs)]
            for name in names:  # Each round starts with the next path.
                env_before = callback_env.env_seconds
                start, cpu_start = time.perf_counter(), time.process_time()
                runs[name]()
                row[name] = (time.perf_counter() - start) / steps
                row[f"{name}_cpu"] = (time.process_time() - cpu_start) / steps
                if name == "callback":
                    row["callback_env"] = (callback_env.env_seconds - env_before) / steps
            rows.append(row)
    finally:
        for batch in batches:
            batch.close()
        vector_env.ale = None  # Frees ale-py's batch, which joins its threads.

    def median_us(value) -> float:
        return round(statistics.median(value(row) for row in rows) * 1e6, 1)

    return {
        "num_envs": num_envs,
        "us_per_batch_step": {name: median_us(lambda row, n=name: row[n]) for name in runs},
        "overhead_us_ffi": median_us(lambda row: row["ffi"] - row["python"]),
        "overhead_us_callback": median_us(lambda row: row["callback"] - row["python"]),
        "overhead_us_ffi_plain": median_us(lambda row: row["ffi_plain"] - row["python"]),
        "overhead_us_callback_in_run": median_us(lambda row: row["callback"] - row["callback_env"]),
        "cpu_us_per_batch_step": {
            name: median_us(lambda row, n=name: row[f"{n}_cpu"]) for name in runs
        },
        "cpu_overhead_us": {
            name: median_us(lambda row, n=name: row[f"{n}_cpu"] - row["python_cpu"])
            for name in envs
        },
        "callback_over_ffi_time": round(
            statistics.median(row["callback"] / row["ffi"] for row in rows), 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sizes", nargs="*", type=int, default=[8, 32])
    parser.add_argument("--xla-threads", action="store_true", help="keep XLA's thread pool")
    args = parser.parse_args()
    if not args.xla_threads:
        xla_threads.limit()
    results = [measure(n, args.steps, args.rounds) for n in args.sizes]
    print(
        json.dumps(
            {
                "benchmark": "atari_step_overhead",
                "game": GAME,
                "jax": jax.__version__,
                "xla_flags": os.environ.get("XLA_FLAGS", ""),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

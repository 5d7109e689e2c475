"""Per batch step, the time simulate on worker envs spends beyond env work and policy math.

Prints one JSON line. For each env and batch size, in the same run and alternating
rounds (median kept), it times per batch step:
  env:      BatchEnv stepped with pre-generated actions (env work, messaging included);
  policy:   the jitted 64x64 MLP policy alone, in a lax.scan over changing observations;
  loop:     a Python loop calling the jitted policy, then BatchEnv.step;
  simulate: simulate.collect through InGraphBatchEnv, compiled in one loop;
  copied:   the same with the bridge copying each call's arrays (`in_place=False`), as
            it does when acting runs on an accelerator (here on the CPU, so the copies
            are host to host: the cost of the callback path, not of the bus).
Overhead = total - env - policy, for the loop and for simulate. Because env and
simulate run at different moments of a noisy machine, simulate's overhead is also
given from within its own rounds: total minus the time its host calls spent in
`BatchEnv.step` and `reset` (`InGraphBatchEnv.env_seconds`), minus policy. XLA runs on one
thread (`xla_threads.limit()`, as the train command does for worker envs) unless
--xla-threads is given, so its thread pool does not take cores from the workers.

    python benchmarks/simulate_overhead.py [--steps 500] [--rounds 3] [--xla-threads]
        [--local-envs auto]

With `--envs trivial --local-envs all` the envs step in this process and take almost
no time, which leaves simulate's own cost per step.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import policies

from batchrl import bridge, simulate
from batchrl.bridge import xla_threads
from batchrl.envs import BatchEnv
from batchrl.testing import mock

ENVS = {
    "trivial": functools.partial(mock.CountingEnv, duration=1000, obs_size=17),
    "HalfCheetah-v5": "HalfCheetah-v5",
}


def per_step(function, steps: int) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) / steps


def measure(name: str, num_envs: int, steps: int, rounds: int, local_envs: int | str) -> dict:
    local_envs = num_envs if local_envs == "all" else local_envs
    batch_env = BatchEnv.external(ENVS[name], num_envs, local_envs=local_envs)
    try:
        obs_size = batch_env.single_observation_space.shape[0]
        action_size = batch_env.single_action_space.shape[0]
        params = policies.init_mlp(jax.random.key(1), [obs_size, 64, 64, action_size])
        agent = policies.gaussian_agent(params)
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        rollout = simulate.make_collect(env, agent, steps)
        state = simulate.init(env, jax.random.key(0))
        copying = bridge.InGraphBatchEnv(batch_env, seed=0, in_place=False)
        copied_rollout = simulate.make_collect(copying, agent, steps)
        copied_state = simulate.init(copying, jax.random.key(0))
        policy = jax.jit(lambda obs, key: agent.perform((), obs, key)[1])
        obs0 = jnp.ones((num_envs, obs_size))

        @jax.jit
        def policy_scan(key, obs):
            # The observations change every step, as in a rollout: on constant ones
            # XLA would fold most of the network away and under-count its arithmetic.
            def body(carry, _):
                key, obs = carry
                key, act_key = jax.random.split(key)
                action = policy(obs, act_key)
                return (key, obs + 1e-6 * action.mean()), None

            return jax.lax.scan(body, (key, obs), None, length=steps)[0]

        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, (steps, num_envs, action_size)).astype(np.float32)

        def run_env():
            for action in actions:
                batch_env.step(action)  # Finished envs reset in their workers.

        def run_loop():
            obs, _ = batch_env.reset(seed=0)
            key = jax.random.key(0)
            for _ in range(steps):
                key, act_key = jax.random.split(key)
                action = np.asarray(policy(obs, act_key))
                obs = batch_env.step(action)[0]

        env_in_simulate: list[float] = []  # Per simulate round: env seconds per step.

        def run_simulate():
            nonlocal state
            before = env.env_seconds
            state, _ = rollout(state, ())
            env_in_simulate.append((env.env_seconds - before) / steps)

        def run_copied():
            nonlocal copied_state
            copied_state, _ = copied_rollout(copied_state, ())

        def run_policy():
            jax.block_until_ready(policy_scan(jax.random.key(0), obs0))

        batch_env.reset(seed=0)
        for warm_up in (run_policy, run_simulate, run_copied, run_loop):
            warm_up()
        env_in_simulate.clear()
        runs = {
            "env": run_env,
            "policy": run_policy,
            "loop": run_loop,
            "simulate": run_simulate,
            "copied": run_copied,
        }
        times = {key: [] for key in runs}
        for _ in range(rounds):
            for key, run in runs.items():
                times[key].append(per_step(run, steps))
        # The simulate rounds' own time outside the envs: immune to the machine's drift
        # between the env-only and the simulate rounds.
        pairs = zip(times["simulate"], env_in_simulate, strict=True)
        times["simulate_outside_env"] = [total - env_time for total, env_time in pairs]
        us = {key: statistics.median(values) * 1e6 for key, values in times.items()}
    finally:
        batch_env.close()
    overhead_loop = us["loop"] - us["env"] - us["policy"]
    overhead_simulate = us["simulate"] - us["env"] - us["policy"]
    overhead_copied = us["copied"] - us["env"] - us["policy"]
    overhead_in_run = us.pop("simulate_outside_env") - us["policy"]
    return {
        "env": name,
        "num_envs": num_envs,
        "us_per_batch_step": {key: round(value, 1) for key, value in us.items()},
        "overhead_us_loop": round(overhead_loop, 1),
        "overhead_us_simulate": round(overhead_simulate, 1),
        "overhead_us_simulate_in_run": round(overhead_in_run, 1),
        "overhead_us_copied": round(overhead_copied, 1),
        "simulate_over_loop_speed": round(us["loop"] / us["simulate"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envs", nargs="*", default=list(ENVS))
    parser.add_argument("--sizes", nargs="*", type=int, default=[8, 32])
    parser.add_argument("--xla-threads", action="store_true", help="keep XLA's thread pool")
    parser.add_argument(
        "--local-envs",
        default="0",
        help="BatchEnv.external's local_envs: a number, 'auto', or 'all' (no workers)",
    )
    args = parser.parse_args()
    if not args.xla_threads:
        xla_threads.limit()
    warnings.filterwarnings("ignore")
    local_envs = args.local_envs
    if local_envs not in ("auto", "all"):
        if not local_envs.isdigit():
            parser.error(f"--local-envs is a number, 'auto' or 'all', got {local_envs!r}")
        local_envs = int(local_envs)
    results = [
        measure(name, n, args.steps, args.rounds, local_envs)
        for name in args.envs
        for n in args.sizes
    ]
    print(
        json.dumps(
            {
                "benchmark": "simulate_overhead",
                "jax": jax.__version__,
                "xla_flags": os.environ.get("XLA_FLAGS", ""),
                "local_envs": local_envs,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

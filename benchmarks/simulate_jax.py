"""Env-steps/s of simulate with a 64x64 MLP policy on JAX-native Pendulum, fully compiled.

Prints one JSON line. The peer, in the same run, is a bare lax.scan of the same env
and policy (vmapped step, masked reset, no episode bookkeeping): the cost of simulate's
bookkeeping is the ratio between the two.

    python benchmarks/simulate_jax.py [--steps 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import jax
import policies

from batchrl import simulate
from batchrl.envs.jax import classic, jax_env


def timed(function, *args) -> float:
    jax.block_until_ready(function(*args))  # Compile and warm up.
    start = time.perf_counter()
    jax.block_until_ready(function(*args))
    return time.perf_counter() - start


def measure(num_envs: int, steps: int, rounds: int) -> dict:
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), num_envs)
    sizes = [policies.input_size(env.env_spec), 64, 64, math.prod(env.env_spec.action_shape)]
    params = policies.init_mlp(jax.random.key(1), sizes)
    agent = policies.gaussian_agent(params, scale=2.0)

    @jax.jit
    def run_simulate(state):
        return simulate.rollout(env, agent, state, (), steps)[0].score.sum()

    @jax.jit
    def run_bare(key):
        env_state, obs = env.init(key)

        def body(carry, _):
            env_state, obs, key = carry
            key, act_key, reset_key = jax.random.split(key, 3)
            _, action, _ = agent.perform((), obs, act_key)
            env_state, time_step = env.step(env_state, action)
            done = time_step.terminated | time_step.truncated
            env_state, obs = env.reset(env_state, time_step.obs, reset_key, done)
            return (env_state, obs, key), time_step.reward.sum()

        return jax.lax.scan(body, (env_state, obs, key), None, length=steps)[1].sum()

    state = simulate.init(env, jax.random.key(0))
    simulate_times, bare_times = [], []
    for _ in range(rounds):
        simulate_times.append(timed(run_simulate, state))
        bare_times.append(timed(run_bare, jax.random.key(0)))
    simulate_rate = num_envs * steps / statistics.median(simulate_times)
    bare_rate = num_envs * steps / statistics.median(bare_times)
    return {
        "num_envs": num_envs,
        "steps": steps,
        "simulate_env_steps_per_sec": round(simulate_rate),
        "bare_scan_env_steps_per_sec": round(bare_rate),
        "simulate_over_bare_scan": round(simulate_rate / bare_rate, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", nargs="*", type=int, default=[1024, 4096])
    args = parser.parse_args()
    results = [measure(n, args.steps, args.rounds) for n in args.sizes]
    print(
        json.dumps(
            {
                "benchmark": "simulate_jax",
                "env": "Pendulum-v1 (JAX-native)",
                "policy": "MLP 64x64 tanh, Gaussian",
                "jax": jax.__version__,
                "backend": jax.default_backend(),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

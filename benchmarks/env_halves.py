"""Does stepping one half of the batch while the policy acts on the other pay on this machine?

Prints one JSON line. EnvPool's async mode and Sample Factory's double buffering split
the batch in two: while half A's envs step, the policy computes half B's actions, so
neither the envs nor the policy waits for the other. Here the acting loop runs on the
host, with the policy jitted (a 256x256 tanh MLP, `cheetah_clipped`'s size), for:

- `serial`: one batch; the policy acts on all envs, then all envs step;
- `halves`: two batches of half the envs; a thread steps one half (MuJoCo and the
  worker pipes release the GIL) while this thread computes the other half's actions.

Each for `BatchEnv.mujoco` (each half with one MuJoCo thread per core, as the whole
batch has) and `BatchEnv.external` (worker processes, `local_envs=0`), in rounds that
alternate the variants; the ratio halves / serial is given per round.

    python benchmarks/env_halves.py [--rounds 5] [--seconds 3] [--num-envs 32]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import time
import warnings

import flags

from batchrl.bridge import xla_threads

xla_threads.limit()  # As in training: one XLA thread beside the envs.

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from policies import init_mlp, mlp  # noqa: E402

from batchrl.envs import BatchEnv  # noqa: E402

ENV = "HalfCheetah-v5"


def policy(obs_size: int, action_size: int):
    params = init_mlp(jax.random.key(0), [obs_size, 256, 256, action_size])
    act = jax.jit(lambda obs: jnp.tanh(mlp(params, obs.astype(jnp.float32))))
    return lambda obs: np.asarray(act(obs))


def serial_rate(env: BatchEnv, act, seconds: float) -> float:
    obs, _ = env.reset(seed=0)
    act(obs)  # Compiles.
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs = env.step(act(obs))[0]
        steps += env.num_envs
    return steps / (time.perf_counter() - start)


def halves_rate(halves: list[BatchEnv], act, seconds: float, pool) -> float:
    first, second = halves
    obs_a = first.reset(seed=0)[0]
    obs_b = second.reset(seed=first.num_envs)[0]
    act(obs_a)
    steps, start = 0, time.perf_counter()
    stepping = pool.submit(first.step, act(obs_a))
    while time.perf_counter() - start < seconds:
        action_b = act(obs_b)  # While half A steps.
        obs_a = stepping.result()[0]
        stepping = pool.submit(second.step, action_b)
        action_a = act(obs_a)  # While half B steps.
        obs_b = stepping.result()[0]
        stepping = pool.submit(first.step, action_a)
        steps += first.num_envs + second.num_envs
    stepping.result()
    return steps / (time.perf_counter() - start)


def measure(backend: str, num_envs: int, rounds: int, seconds: float) -> dict:
    half = num_envs // 2
    if backend == "mujoco":
        whole = BatchEnv.mujoco(ENV, num_envs)
        halves = [BatchEnv.mujoco(ENV, half) for _ in range(2)]
    else:
        whole = BatchEnv.external(ENV, num_envs)
        halves = [BatchEnv.external(ENV, half, first_index=i * half) for i in range(2)]
    act = policy(whole.single_observation_space.shape[0], whole.single_action_space.shape[0])
    samples: dict[str, list[float]] = {"serial": [], "halves": []}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            for _ in range(rounds):
                samples["serial"].append(round(serial_rate(whole, act, seconds)))
                samples["halves"].append(round(halves_rate(halves, act, seconds, pool)))
        finally:
            for env in (whole, *halves):
                env.close()
    ratios = [round(h / s, 3) for h, s in zip(samples["halves"], samples["serial"], strict=True)]
    return {
        "backend": backend,
        "steps_per_sec": samples,
        "halves_over_serial": ratios,
        "median_halves_over_serial": statistics.median(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=flags.positive_int, default=5)
    parser.add_argument("--seconds", type=flags.positive_float, default=3.0)
    parser.add_argument("--num-envs", type=flags.positive_int, default=32)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.num_envs < 2 or args.num_envs % 2:  # Two halves of the same batch as the whole.
        parser.error(f"--num-envs must be even and at least 2, got {args.num_envs}")
    warnings.filterwarnings("ignore")
    results = [
        measure(backend, args.num_envs, args.rounds, args.seconds)
        for backend in ("mujoco", "processes")
    ]
    record = {
        "benchmark": "env_halves",
        "env": ENV,
        "num_envs": args.num_envs,
        "cores": len(os.sched_getaffinity(0)),
        "results": results,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()

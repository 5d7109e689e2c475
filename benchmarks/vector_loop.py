"""The CleanRL-style example on each vector env: env-steps/s of the same PPO loop.

Prints one JSON line. `examples/ppo_vector.py` trains on SyncVectorEnv, AsyncVectorEnv
and batchrl's BatchEnv (only its constructor differs), in alternating rounds in the
same run (the median is kept), on HalfCheetah-v5 with 8 envs by default. Each run
includes its one-off costs (starting workers, compiling the update), as a user's does.

    python benchmarks/vector_loop.py [--steps 32768] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import platform
import statistics
import sys
import warnings

import gymnasium as gym
import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import ppo_vector

VECTORS = ("sync", "async", "batchrl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=32_768, help="env steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    base = ppo_vector.Args(env=args.env, num_envs=args.num_envs, total_steps=args.steps)
    update = base.num_steps * base.num_envs
    if args.steps < update or args.rounds < 1:
        parser.error(
            f"--steps must be at least one update's {update} env steps and --rounds at least 1, "
            f"got {args.steps} and {args.rounds}"
        )
    rates: dict[str, list[float]] = {vector: [] for vector in VECTORS}
    for _ in range(args.rounds):
        for vector in VECTORS:
            result = ppo_vector.train(dataclasses.replace(base, vector=vector))
            rates[vector].append(result["env_steps_per_sec"])
    median = {vector: statistics.median(values) for vector, values in rates.items()}
    print(
        json.dumps(
            {
                "benchmark": "vector_loop",
                "env": args.env,
                "num_envs": args.num_envs,
                "env_steps_per_run": result["env_steps"],
                "env_steps_per_sec": {vector: round(rate) for vector, rate in median.items()},
                "every_round": rates,
                "batchrl_over_sync": round(median["batchrl"] / median["sync"], 2),
                "batchrl_over_async": round(median["batchrl"] / median["async"], 2),
                "python": platform.python_version(),
                "jax": jax.__version__,
                "gymnasium": gym.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()

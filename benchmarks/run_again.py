"""Runs of one JAX-native preset, seed after seed in one process: with and without reuse.

Prints one JSON line: each run's wall time with the programs of the first run reused
(`training.reuse`, the default) and with every run building its own (the kept programs
cleared before each, as every run did before), and the ratio of their sums after the
first. Run: python benchmarks/run_again.py [--config pendulum_jax] [--seeds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time

from batchrl.configs import overrides, presets, train_config


def walls(config: train_config.TrainConfig, seeds: int, reuse_programs: bool) -> list[float]:
    """Each seed's wall time of `run.train` in memory, one after another."""
    from batchrl.training import reuse
    from batchrl.training import run as run_lib

    reuse.clear()
    seconds = []
    for seed in range(seeds):
        if not reuse_programs:
            reuse.clear()
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # Its phase lines: stdout is the JSON's.
            run_lib.train(None, dataclasses.replace(config, seed=seed))
        seconds.append(round(time.perf_counter() - start, 2))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="pendulum_jax")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--set", action="extend", nargs="+", metavar="KEY=VALUE", help="steps=12000 if none"
    )
    args = parser.parse_args()
    args.set = args.set or ["steps=12000"]
    config = presets.get(args.config)
    for text in args.set:
        config = overrides.parse_override(config, text)
    # Programs compiled by one pass are not read back by the other: no persistent cache.
    without = walls(config, args.seeds, reuse_programs=False)
    reused = walls(config, args.seeds, reuse_programs=True)
    line = {
        "benchmark": "run_again",
        "config": args.config,
        "settings": args.set,
        "wall_seconds_reused": reused,
        "wall_seconds_built_each": without,
        "later_runs_ratio": round(sum(without[1:]) / max(sum(reused[1:]), 1e-9), 1),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()

"""How much slower a small fixed piece of work runs right after the process waited.

Prints one JSON line. Every batch step of simulate runs the policy and its own
bookkeeping right after the envs stepped, so what this machine does to code that
follows a wait of an env step's length bounds simulate's overhead from below. The work
is a 64x64 MLP in numpy on a batch of 32 observations (what a policy does, without
JAX); before each timing the process either spins on the clock (touching no memory,
keeping its core) or sleeps, for 0 to 5000 µs. Rounds alternate; medians are kept.

    python benchmarks/cold_after_wait.py [--repeats 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import time

import numpy as np

WAITS_US = (0, 50, 300, 1500, 5000)


def make_work():
    rng = np.random.default_rng(0)
    sizes = [17, 64, 64, 6]
    weights = [rng.normal(size=(m, n)).astype(np.float32) for m, n in itertools.pairwise(sizes)]
    obs = rng.normal(size=(32, 17)).astype(np.float32)

    def work() -> None:
        x = obs
        for weight in weights[:-1]:
            x = np.tanh(x @ weight)
        x @ weights[-1]

    return work


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_us(work, wait, seconds: float, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        wait(seconds)
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=400, help="timings per wait and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating repeats; median kept")
    args = parser.parse_args()
    work = make_work()
    for _ in range(1000):
        work()
    waits = {"spin": spin, "sleep": time.sleep}
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for mode, wait in waits.items():
            for wait_us in WAITS_US:
                if mode == "sleep" and wait_us == 0:
                    continue
                key = f"{mode}_{wait_us}_us"
                samples.setdefault(key, []).append(
                    median_us(work, wait, wait_us * 1e-6, args.repeats)
                )
    us = {key: round(statistics.median(values), 1) for key, values in samples.items()}
    hot = us["spin_0_us"]
    print(
        json.dumps(
            {
                "benchmark": "cold_after_wait",
                "work": "64x64 MLP in numpy, batch 32",
                "cores": len(os.sched_getaffinity(0)),
                "python": platform.python_version(),
                "work_us_after_wait": us,
                "slowdown_after_wait": {key: round(value / hot, 2) for key, value in us.items()},
            }
        )
    )


if __name__ == "__main__":
    main()

"""How far two evaluations of the same parameters differ, beside how far seeds differ.

Prints one JSON line per preset of a sweep. Each run's final policy (its last
checkpoint) is scored `--repeats` times on `--episodes` new episodes each
(`batchrl.scripts.evaluate --repeats`). Within: the standard deviation of one
evaluation's score between repeats of the same parameters, pooled over seeds. Between:
the standard deviation over seeds of each seed's mean score. An evaluation is a
measurement of the policy rather than of the episodes drawn when within is well below
between; the clipped presets' final episode count is chosen from this (on 32 episodes,
within 1.8 against between 698 on Hopper, 105 against 1,020 on Walker2d).

    python benchmarks/evaluation_noise.py --logdir runs/heldout --configs walker_clipped \
        --episodes 8 32 --repeats 4
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

from batchrl.scripts import evaluate, provenance
from batchrl.training import checkpoint, run_folder


def scores(rundir: pathlib.Path, episodes: int, repeats: int) -> tuple[list[float], int]:
    """The final policy's mean return in each of `repeats` evaluations of at least `episodes`.

    Also the fewest episodes an evaluation scored: rounds of every env's episode, so a
    run of 30 envs scores 30 where 4 are asked.
    """
    last = checkpoint.steps(run_folder.checkpoints(rundir))[-1]
    rows = evaluate.evaluate(rundir, episodes, phases=[last], repeats=repeats)
    return [row["return"] for row in rows], min(row["episodes"] for row in rows)


def noise(by_seed: dict[int, list[float]]) -> dict[str, float]:
    """Within (pooled over seeds) and between (over seeds' means) standard deviations."""
    within = statistics.fmean(statistics.variance(values) for values in by_seed.values()) ** 0.5
    between = statistics.stdev(statistics.fmean(values) for values in by_seed.values())
    return {"within_std": within, "between_std": between, "ratio": within / between}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True, type=pathlib.Path, help="a sweep's folder")
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument("--episodes", nargs="+", type=int, default=[32])
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args(argv)
    for config in args.configs:
        runs = sorted(args.logdir.glob(f"seed*-{config}"))
        seeds = [int(run_folder.parse(run.name)[0].removeprefix("seed")) for run in runs]
        if len(runs) < 2:
            print(f"evaluation_noise: {config}: needs two runs, found {len(runs)}", file=sys.stderr)
            return 2
        for episodes in args.episodes:
            scored = {
                seed: scores(run, episodes, args.repeats)
                for seed, run in zip(seeds, runs, strict=True)
            }
            by_seed = {seed: returns for seed, (returns, _) in scored.items()}
            line = {
                "benchmark": "evaluation_noise",
                "config": config,
                "episodes": episodes,  # Asked; each evaluation scored at least episodes_scored.
                "episodes_scored": min(count for _, count in scored.values()),
                "repeats": args.repeats,
                **noise(by_seed),
                "scores": by_seed,
                "machine": provenance.machine(),
                "commit": provenance.source_commit(),
            }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning curve of a preset: trains it for a budget and prints one JSON line.

Runs the same code as `python -m batchrl.scripts.train` in a temporary (or given)
folder and reports the evaluation return (mean action) over training, the final one,
and the wall-clock time. The MuJoCo presets take hours at their full budget; --steps
sets a smaller one.

    python benchmarks/learning.py --config cheetah_clipped --steps 1000000 [--logdir runs]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import sys
import tempfile
import time

from batchrl.scripts import train
from batchrl.training import logging as logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cheetah_clipped")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", help="keep the run here (default: a temporary folder)")
    args = parser.parse_args()
    logdir = pathlib.Path(args.logdir or tempfile.mkdtemp(prefix="batchrl-learning-"))
    start = time.perf_counter()
    argv = ["--logdir", str(logdir), "--config", args.config, "--seed", str(args.seed)]
    with contextlib.redirect_stdout(sys.stderr):  # Progress to stderr; stdout: one JSON line.
        code = train.main([*argv, "--set", f"steps={args.steps}"])
    seconds = time.perf_counter() - start
    (run,) = [p for p in logdir.iterdir() if p.name.endswith(f"-{args.config}")][-1:]
    rows = logs.read_jsonl(run / "metrics.jsonl")
    curve = [[row["step"], row["eval/return"]] for row in rows]
    print(
        json.dumps(
            {
                "benchmark": "learning",
                "config": args.config,
                "seed": args.seed,
                "env_steps": rows[-1]["step"] if rows else 0,
                "final_eval_return": rows[-1]["eval/return"] if rows else None,
                "best_eval_return": max((r for _, r in curve if r is not None), default=None),
                "wall_seconds": round(seconds, 1),
                "exit_status": code,
                "eval_curve": curve,
            }
        )
    )


if __name__ == "__main__":
    main()

"""A sweep's final policies scored again, each averaged over its last kept phases or not.

For every run of the sweeps' `results.jsonl`, scores the last checkpoint's parameters
averaged with those of the K - 1 kept phases before it (`evaluate --average-last K`),
from the run's own seeded starts (the same whatever K), and prints the run's sweep line
with `final_return` that score, `final_episodes` its count and `settings.average_last`
K. Training is the same run up to the final phase whatever K is, so this is the final
policy a run with `average_last=K` ends with; K = 1 re-scores the last phase's own
parameters on the same starts, the comparison (a held-out Hopper seed: 3,734 averaged over
three phases, 1,382 from its last).

    python benchmarks/final_average.py --logdir runs/heldout --average-last 3 --episodes 32
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from batchrl.scripts import evaluate, provenance
from batchrl.training import checkpoint, run_folder


def rescored(line: dict, rundir: pathlib.Path, average_last: int, episodes: int) -> dict:
    """The sweep `line` of the run in `rundir` with its final policy scored again."""
    last = checkpoint.steps(run_folder.checkpoints(rundir))[-1]
    (row,) = evaluate.evaluate(rundir, episodes, phases=[last], average_last=average_last)
    settings = {**line.get("settings", {}), "average_last": average_last}
    return {
        **line,
        "final_return": row["return"],
        "final_episodes": row["episodes"],
        "settings": settings,
        "scored": f"benchmarks/final_average.py --average-last {average_last}",
        "scored_on": provenance.source_commit(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", nargs="+", required=True, type=pathlib.Path)
    parser.add_argument("--average-last", type=int, default=3, metavar="K")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--configs", nargs="+", help="only these presets' runs")
    args = parser.parse_args(argv)
    for logdir in args.logdir:
        for text in (logdir / "results.jsonl").read_text().splitlines():
            line = json.loads(text)
            if args.configs and line["config"] not in args.configs:
                continue
            rundir = logdir / f"seed{line['seed']}-{line['config']}"
            print(json.dumps(rescored(line, rundir, args.average_last, args.episodes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

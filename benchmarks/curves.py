"""Evaluation curves of sweeps side by side: batchrl's presets and the RL Zoo's runs.

    python benchmarks/curves.py \
        docs/results/archive/clipped_ten_seeds/cheetah_clipped_ten_seeds.jsonl \
        docs/results/rl_zoo/rl_zoo_halfcheetah.jsonl --x hours --out cheetah_zoo_hours.png

The files hold the JSON lines of `batchrl.scripts.sweep` or `benchmarks/rl_zoo.py`, one
run a line, each with its `eval_curve` of [env steps, return, wall seconds]; finished runs
are read, as `batchrl.scripts.stats` reads them. Each library's config is one curve: the
mean over its runs and a band from the lowest to the highest run, against env steps or
against wall-clock hours (each evaluation at its runs' mean time), labelled with the
library, the config and how many seeds made it.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib

import numpy as np
from matplotlib import ticker
from matplotlib.backends import backend_agg
from matplotlib.figure import Figure


def curves(paths: list[pathlib.Path]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """By label, the [runs, evaluations] arrays of x (steps, seconds) and of return."""
    grouped: dict[tuple[str, str], list[list]] = collections.defaultdict(list)
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                run = json.loads(line) if line.strip() else {}
            except json.JSONDecodeError:
                raise SystemExit(f"{path}:{number} is not a JSON line") from None
            if run.get("finished"):
                grouped[run.get("library", "batchrl"), run["config"]].append(run["eval_curve"])
    if not grouped:
        raise SystemExit(f"no finished run in {', '.join(map(str, paths))}")
    found = {}
    for (library, config), runs in grouped.items():
        length = min(map(len, runs))  # The evaluations every run of the config made.
        points = np.array([run[:length] for run in runs], float)
        label = f"{library} {config} ({len(runs)} seed{'s' * (len(runs) > 1)})"
        found[label] = points[..., [0, 2]], points[..., 1]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=pathlib.Path, metavar="JSONL")
    parser.add_argument("--x", choices=("steps", "hours"), default="steps")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    figure = Figure(figsize=(8, 5))
    backend_agg.FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, (x, returns) in curves(args.files).items():
        x = x[..., 0].mean(axis=0) if args.x == "steps" else x[..., 1].mean(axis=0) / 3600
        axes.plot(x, returns.mean(axis=0), label=label)
        if len(returns) > 1:
            axes.fill_between(x, returns.min(axis=0), returns.max(axis=0), alpha=0.2)
    if args.x == "steps":
        axes.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v / 1e3:,.0f}k"))
    axes.set_xlabel("env steps" if args.x == "steps" else "wall-clock hours")
    axes.set_ylabel("evaluation return (mean action)")
    axes.set_title(args.title)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(args.out, dpi=100)
    print(json.dumps({"wrote": str(args.out)}))


if __name__ == "__main__":
    main()

"""Evaluation curves of sweeps side by side: batchrl's presets and the RL Zoo's runs.

    python benchmarks/curves.py docs/results/cheetah_clipped_ten_seeds.jsonl \
        docs/results/rl_zoo_halfcheetah.jsonl --x hours --out cheetah_zoo_hours.png

Each file holds the JSON lines of `batchrl.scripts.sweep` or `benchmarks/rl_zoo.py`, one
run a line, each with its `eval_curve` of [env steps, return, wall seconds]. A file is one
curve: the mean over its runs and a band from the lowest to the highest run, against env
steps or against wall-clock hours (each evaluation at its runs' mean time). Its label
names the library, the config and how many seeds made it.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np
from matplotlib import ticker
from matplotlib.backends import backend_agg
from matplotlib.figure import Figure


def curve(path: pathlib.Path) -> tuple[str, np.ndarray, np.ndarray]:
    """A file's label and its [runs, evaluations] arrays of x (steps, seconds) and return."""
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not runs:
        raise SystemExit(f"{path}: no runs")
    length = min(len(run["eval_curve"]) for run in runs)  # Unfinished runs: their common part.
    points = np.array([run["eval_curve"][:length] for run in runs], float)
    library = runs[0].get("library", "batchrl")
    label = f"{library} {runs[0]['config']} ({len(runs)} seed{'s' * (len(runs) > 1)})"
    return label, points[..., [0, 2]], points[..., 1]


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
    for path in args.files:
        label, x, returns = curve(path)
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

"""Plots training curves of runs: returns against env steps, one colour per run.

    python -m batchrl.scripts.plot RUN [RUN ...] --out curves.png [--metrics train/return ...]

Reads RUN/metrics.jsonl of each run folder and draws each metric against "perf/env_steps",
one line style per metric and one colour per run, as in Figure 1 of the batch-ppo paper.
Draws headless with matplotlib's Agg canvas. A missing or unreadable run ends with one line
on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib import lines, ticker
from matplotlib.backends import backend_agg
from matplotlib.figure import Figure

from batchrl.training import logging as logging_lib

X_KEY = "perf/env_steps"
DEFAULT_METRICS = ("train/return", "eval/return")
LINE_STYLES = ("-", "--", ":", "-.")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m batchrl.scripts.plot", description=__doc__.splitlines()[0]
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder with metrics.jsonl")
    parser.add_argument("--out", required=True, help="image file to write, e.g. curves.png")
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_METRICS),
        metavar="KEY",
        help=f"metrics to draw (default: {' '.join(DEFAULT_METRICS)})",
    )
    return parser.parse_args(argv)


def series(records: Sequence[dict[str, Any]], metric: str) -> tuple[list[float], list[float]]:
    """Points (env steps, value) of one metric, in run order.

    Records without the metric or env steps, or with null in either, are skipped. When env
    steps go back (a run resumed from a checkpoint older than its last records), the points
    it re-does replace the earlier ones, as TensorBoard's purge does.

    Args:
        records: the lines of a metrics.jsonl.
        metric: the key to draw.

    Returns:
        The x and y values, x increasing.
    """
    points: list[tuple[float, float]] = []
    for record in records:
        x, y = record.get(X_KEY), record.get(metric)
        if x is None or y is None:
            continue
        while points and points[-1][0] >= x:
            points.pop()
        points.append((x, y))
    return [x for x, _ in points], [y for _, y in points]


def labels(runs: Sequence[Path]) -> list[str]:
    """Legend names: the run folders' names, or the paths as given when two names clash."""
    names = [run.resolve().name or str(run) for run in runs]
    if len(set(names)) < len(names):
        return [str(run) for run in runs]
    return names


class RunError(Exception):
    """A run folder that cannot be plotted: reported as one line, exit status 2."""


def load(run: Path) -> list[dict[str, Any]]:
    """The records of a run folder's metrics.jsonl.

    Raises:
        RunError: if the folder or its metrics.jsonl is missing or a line does not parse.
    """
    if not run.is_dir():
        raise RunError(f"run folder not found: {run}")
    path = run / logging_lib.JSONL_NAME
    if not path.is_file():
        raise RunError(f"no {logging_lib.JSONL_NAME} in run folder {run}")
    try:
        return logging_lib.read_jsonl(path)
    except ValueError as error:  # Also a file that is not UTF-8.
        raise RunError(str(error)) from error


def draw(runs: dict[str, list[dict[str, Any]]], metrics: Sequence[str]) -> Figure:
    """Draws every metric of every run on one axes; the legend names runs and line styles.

    Args:
        runs: the records of each run, by legend name.
        metrics: the keys to draw, one line style each.

    Returns:
        The figure, on an Agg canvas.
    """
    figure = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    backend_agg.FigureCanvasAgg(figure)
    axes = figure.subplots()
    handles = []
    for index, (label, records) in enumerate(runs.items()):
        colour = f"C{index % 10}"
        for metric, style in zip(metrics, itertools.cycle(LINE_STYLES), strict=False):
            axes.plot(*series(records, metric), color=colour, linestyle=style, linewidth=1.5)
        handles.append(lines.Line2D([], [], color=colour, label=label))
    for metric, style in zip(metrics, itertools.cycle(LINE_STYLES), strict=False):
        handles.append(lines.Line2D([], [], color="0.3", linestyle=style, label=metric))
    axes.legend(handles=handles, fontsize="small")
    axes.set_xlabel("env steps")
    axes.set_ylabel("return" if all(m.endswith("return") for m in metrics) else "value")
    axes.xaxis.set_major_formatter(ticker.EngFormatter(sep=""))
    axes.grid(alpha=0.3)
    return figure


def main(argv: list[str] | None = None) -> int:
    """Plots the runs named on the command line; returns the exit status.

    Args:
        argv: the arguments after the program name; sys.argv[1:] when None.

    Returns:
        0 when the image was written, 2 when a run folder or its metrics.jsonl is missing or
        unreadable.
    """
    args = parse_args(argv)
    paths = [Path(run) for run in args.runs]
    try:
        runs = {label: load(path) for label, path in zip(labels(paths), paths, strict=True)}
    except RunError as error:
        print(f"plot: error: {error}", file=sys.stderr)
        return 2
    figure = draw(runs, args.metrics)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

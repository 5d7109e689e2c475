"""Plots training curves of runs: returns against env steps or hours of training.

    python -m batchrl.scripts.plot RUN [RUN ...] --out curves.png [--metrics train/return ...]
    python -m batchrl.scripts.plot runs/sweep/seed*-cheetah_clipped --seeds --x hours --out c.png
    python -m batchrl.scripts.plot runs/sweep --seeds --out c.png   # every run in the folder
    python -m batchrl.scripts.plot RUN --panels --metrics eval/return train/kl --out why.png

Reads RUN/metrics.jsonl of each run folder (of each run in RUN, where RUN is a folder of
run folders: a logdir, a sweep's) and draws each metric against "perf/env_steps" (or the
hours its phases took, `--x hours`), one line style per metric and one colour per run.
With `--seeds`, runs whose folder names share the config part after the last "-" (the
seeds of one sweep, `seed0-cheetah_clipped`, `seed1-...`) are drawn as one curve: the mean
over seeds and a band from the lowest to the highest, as in Figures 1 and 2 of the seed's
paper, at each x over the seeds whose runs reach it.
Runs of one name whose configs differ beyond their seed (`--set` keeps a preset's name)
are refused, not averaged; a seed given twice is drawn once, its last run.
Metrics of one quantity (`train/return` and `eval/return`) share one axes; others get a
panel each (`--panels`, `--no-panels`). Draws headless with matplotlib's Agg canvas. A
missing or unreadable run ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps, lines, ticker
from matplotlib.backends import backend_agg
from matplotlib.figure import Figure

from batchrl.configs import train_config
from batchrl.scripts import command_line, curve_points, image_out, run_lines, variants
from batchrl.training import file_writes, metrics_log, run_folder

DEFAULT_METRICS = ("train/return", "eval/return")
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")  # A curve of one point, in place of its line style.


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = command_line.ArgumentParser(
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
    parser.add_argument(
        "--x",
        choices=("steps", curve_points.HOURS),
        default="steps",
        help="env steps or training hours",
    )
    parser.add_argument("--seeds", action="store_true", help="a config's seeds: mean and band")
    parser.add_argument(
        "--panels",
        action=argparse.BooleanOptionalAction,
        help="one panel per quantity, over a shared x axis (default: where the metrics are "
        "different quantities, as eval/return and train/kl; train/return and eval/return "
        "share one)",
    )
    return parser.parse_args(argv)


def seeds_apart(runs: dict[str, Path]) -> list[tuple[str, str]]:
    """The runs `--seeds` leaves out, each with the run of its seed drawn; a RunError for a mix.

    A run's folder is named after its config, which `--set` keeps: runs of one name on
    other envs or settings would be averaged as seeds of one curve; a RunError names what
    differs. Runs of one seed (a folder given twice, a run repeated) are one: the last
    given is drawn, as `stats` counts a run's last line; to another budget, a RunError.
    A folder whose config cannot be read is left to its name.
    """
    apart = []
    for name, members in curve_points.groups({label: [label] for label in runs}).items():
        configs: dict[str, Any] = {}
        for (label,) in members:
            with contextlib.suppress(run_folder.RunFolderError):
                configs[label] = train_config.flat(run_folder.read_config(runs[label]))
        # A curve's seeds may end at other steps: each is drawn as far as it reaches.
        differ = variants.differing(list(configs.values()), variants.IGNORED | {"steps"})
        if differ:
            said = ", ".join(
                f"{Path(label).name} ({', '.join(f'{key}={flat.get(key)!r}' for key in differ)})"
                for label, flat in configs.items()
            )
            raise RunError(
                f"--seeds would average runs named {name!r} of different settings: {said}; "
                "plot them without --seeds"
            )
        last = {flat["seed"]: label for label, flat in configs.items()}
        for label, flat in configs.items():  # A seed's run to another budget is no repeat.
            again = last[flat["seed"]]
            if configs[again].get("steps") != flat.get("steps"):
                raise RunError(
                    f"--seeds would draw {label} (steps={flat.get('steps')}) and {again} (steps="
                    f"{configs[again].get('steps')}), seed {flat['seed']} of {name!r}, as one: "
                    "plot each budget's runs apart"
                )
        apart += [
            (label, last[flat["seed"]])
            for label, flat in configs.items()
            if last[flat["seed"]] != label
        ]
    return apart


def labels(runs: Sequence[Path]) -> list[str]:
    """Legend names: the run folders' names, or the paths as given when two names clash."""
    names = [run.resolve().name or str(run) for run in runs]
    if len(set(names)) < len(names):
        return [str(run) for run in runs]
    return names


class RunError(Exception):
    """A run folder that cannot be plotted: reported as one line, exit status 2."""


def runs_in(folders: Sequence[Path]) -> list[Path]:
    """`folders` with each folder of run folders (a logdir, a sweep's) in place of its runs.

    A folder without metrics.jsonl whose subfolders have one is a logdir, as TensorBoard
    reads one; any other stays, for `load` to plot or name what is wrong with it.
    """
    found = []
    for folder in folders:
        inside = []
        if folder.is_dir() and not run_folder.metrics(folder).is_file():
            inside = [run for run in sorted(folder.iterdir()) if run_folder.metrics(run).is_file()]
        found.extend(inside or [folder])
    return found


def load(run: Path) -> list[dict[str, Any]]:
    """The records of a run folder's metrics.jsonl; a RunError if missing or unparsed."""
    if run.is_file():  # `runs/sweep/*` names the sweep's logs and results.jsonl too.
        raise RunError(f"{run} is a file, not a run folder; `plot {run.parent}` plots its runs")
    if not run.is_dir():
        raise RunError(f"run folder not found: {run}")
    path = run_folder.metrics(run)
    if not path.is_file():
        if run_lines.unkept(run):  # Runs that have kept no phase yet.
            raise RunError(run_lines.unkept(run))
        give = "give run folders or their folder"
        raise RunError(f"{run} has no {path.name} in it or a folder in it: {give}")
    try:
        return metrics_log.read_jsonl(path)
    except ValueError as error:  # Also a file that is not UTF-8.
        raise RunError(str(error)) from error


def draw(
    runs: dict[str, list[dict[str, Any]]],
    metrics: Sequence[str],
    x: str = "steps",
    seeds: bool = False,
    panels: bool = False,
) -> Figure:
    """Draws every metric of every run (or seed group), with a legend of both.

    Args:
        runs: the records of each run, by legend name.
        metrics: the keys to draw, one line style each on an axes they share.
        x: "steps" or "hours".
        seeds: draw each group of seeds (see `groups`) as its mean and a min-max band.
        panels: one axes per quantity (`return`, `kl`), stacked over a shared x axis, for
            quantities of different scales read side by side.

    Returns:
        The figure, on an Agg canvas.
    """
    order = (
        list(dict.fromkeys(curve_points.quantity(metric) for metric in metrics)) if panels else [""]
    )
    shared = [[m for m in metrics if not panels or curve_points.quantity(m) == q] for q in order]
    rows = len(shared)
    figure = Figure(figsize=(8, 5 if rows == 1 else 1.6 * rows + 1), dpi=100, layout="constrained")
    backend_agg.FigureCanvasAgg(figure)
    stack = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    curves = (
        curve_points.groups(runs)
        if seeds
        else {label: [records] for label, records in runs.items()}
    )
    handles, pointed = [], set()  # The metrics some curve draws as lone points, marked.
    for index, (label, members) in enumerate(curves.items()):
        colour = colours(len(curves))[index]
        for row, metric in ((row, m) for row, ms in enumerate(shared) for m in ms):
            axes, rank = stack[row], shared[row].index(metric)
            style, one = LINE_STYLES[rank % len(LINE_STYLES)], MARKERS[rank % len(MARKERS)]
            if seeds:
                grid, mean, low, high = curve_points.seed_band(
                    [curve_points.series(m, metric, x) for m in members]
                )
                axes.fill_between(grid, low, high, color=colour, alpha=0.2, linewidth=0)
            else:
                grid, mean = (
                    np.asarray(values, float)
                    for values in curve_points.series(members[0], metric, x)
                )
            lone = curve_points.alone(mean)  # No line reaches them: a marker each.
            pointed.update([metric] if len(lone) else [])
            marker = one if len(lone) else ""
            axes.plot(
                grid, mean, color=colour, linestyle=style, marker=marker, markevery=list(lone)
            )
            if seeds and len(lone):  # Their band as a bar: a band of one x is invisible.
                axes.vlines(grid[lone], low[lone], high[lone], color=colour, linestyles=style)
        name = f"{label} ({curve_points.seed_count(members, metrics, x)})" if seeds else label
        handles.append(lines.Line2D([], [], color=colour, label=name))
    for axes, drawn in zip(stack, shared, strict=True):
        quantities = {curve_points.quantity(metric) for metric in drawn}
        # One metric names its axis; several share a quantity's name and a style each.
        axes.set_ylabel(
            drawn[0] if len(drawn) == 1 else quantities.pop() if len(quantities) == 1 else "value",
            fontsize="small" if rows > 1 else None,
        )
        for rank, metric in enumerate(drawn if len(drawn) > 1 else []):
            marker = MARKERS[rank % len(MARKERS)] if metric in pointed else ""
            style = LINE_STYLES[rank % len(LINE_STYLES)]
            handles.append(
                lines.Line2D([], [], color="0.3", linestyle=style, marker=marker, label=metric)
            )
    if rows > 1 or len(handles) > 8:  # Beside the axes: inside, many names hid curves.
        figure.legend(handles=handles, fontsize="small", loc="outside right upper")
    else:
        stack[0].legend(handles=handles, fontsize="small")
    stack[-1].set_xlabel(
        "hours training and evaluating" if x == curve_points.HOURS else "env steps"
    )
    for axes in stack:
        if x != curve_points.HOURS:
            axes.xaxis.set_major_formatter(ticker.EngFormatter(sep=""))
        axes.grid(alpha=0.3)
    return figure


def colours(count: int) -> list:
    """A colour for each of `count` curves, none twice: tab10's, tab20's past 10, then a map's."""
    if count <= 10:
        return [f"C{index}" for index in range(count)]
    if count <= 20:
        return [colormaps["tab20"](index) for index in range(count)]
    return [colormaps["turbo"](index / (count - 1)) for index in range(count)]


def has_points(records: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """Whether a run has a value of any metric asked for (a run just started has none)."""
    return any(curve_points.series(records, metric, args.x)[0] for metric in args.metrics)


def main(argv: list[str] | None = None) -> int:
    """Plots the runs `argv` (sys.argv[1:] when None) names; returns the exit status.

    0 when the image was written; 2 when a run folder or its metrics.jsonl is missing or
    unreadable, or `--out` names no image format.
    """
    args = parse_args(argv)
    out = Path(args.out)
    if image_out.error(out):  # Said before the runs are read and drawn.
        print(f"plot: error: {image_out.error(out)}", file=sys.stderr)
        return 2
    unique: dict[Path, Path] = {}  # A folder named twice (another path, a link) is one run.
    for run in runs_in([Path(run) for run in args.runs]):
        unique.setdefault(Path(run).resolve(), Path(run))
    paths = list(unique.values())
    try:
        runs = {label: load(path) for label, path in zip(labels(paths), paths, strict=True)}
        apart = seeds_apart(dict(zip(runs, paths, strict=True))) if args.seeds else []
    except RunError as error:
        print(f"plot: error: {error}", file=sys.stderr)
        return 2
    for label, kept in apart:  # As stats counts a run's last line.
        said = f"{label} left out: {kept}, given after it, has its seed (a folder's runs by name)"
        print(f"plot: note: {said}", file=sys.stderr)
        del runs[label]
    missing = [
        m
        for m in args.metrics
        if not any(curve_points.series(r, m, args.x)[0] for r in runs.values())
    ]
    known = sorted({key for records in runs.values() for row in records for key in row})
    # Null so far (no training episode ended), or a default not yet written (no phase
    # evaluated): the others are drawn. A metric asked for by a name no row has is a typo.
    default = args.metrics == list(DEFAULT_METRICS)
    if (default or set(missing) <= set(known)) and len(missing) < len(args.metrics):
        for metric in missing:
            why = "is null in every row" if metric in known else "has no value in any row"
            print(f"plot: note: {metric} {why} so far; left out", file=sys.stderr)
        args.metrics = [metric for metric in args.metrics if metric not in missing]
        missing = []
    if missing:
        close = difflib.get_close_matches(missing[0], known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the runs have {', '.join(known)}"
        if missing[0] in known:  # Null in every row: no training episode ended, say.
            hint = "it is null in every row so far; plot others with --metrics"
        if not known:  # Runs started, their first phase not yet written.
            hint = "the runs have no rows yet"
        print(f"plot: error: no run has a value of metric {missing[0]!r}; {hint}", file=sys.stderr)
        return 2
    for label in [label for label, records in runs.items() if not has_points(records, args)]:
        note = f"plot: note: {label} has no value of {', '.join(args.metrics)} yet; left out"
        print(note, file=sys.stderr)
        del runs[label]  # A legend entry with no line, or "(1 seed)" of none.
    panels = args.panels
    if panels is None:  # A KL beside a return on one axes would read as a flat line at 0.
        panels = len({curve_points.quantity(metric) for metric in args.metrics}) > 1
    figure = draw(runs, args.metrics, args.x, args.seeds, panels)
    try:
        image_out.save(figure, out)
    except file_writes.WriteError as error:  # A folder not writable: it names `out`.
        print(f"plot: error: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError, RuntimeError) as error:  # pgf without LaTeX installed.
        print(f"plot: error: {out}: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

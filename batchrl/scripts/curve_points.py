"""The points `plot` draws: a run's metric against env steps or hours, and seeds' bands.

A run's curve is its metrics.jsonl read as TensorBoard reads its events (a resumed run's
redone points replace the earlier ones); a config's seeds are one curve, their mean and
range at each x some seed reaches, with the number of seeds each x averages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from batchrl.training import results, run_folder

X_KEY = "perf/env_steps"
HOURS = "hours"


def series(
    records: Sequence[dict[str, Any]], metric: str, x: str = "steps"
) -> tuple[list[float], list[float]]:
    """Points (env steps or hours, value) of one metric, in run order.

    Records without the metric or env steps, or with null in either, are skipped. When env
    steps go back (a run resumed from a checkpoint older than its last records), the points
    it re-does replace the earlier ones, as TensorBoard's purge does. Hours are the sum of
    the phases' train and eval seconds up to and including the point's phase.

    Args:
        records: the lines of a metrics.jsonl.
        metric: the key to draw.
        x: "steps" or "hours".

    Returns:
        The x and y values, x increasing.
    """
    kept = results.phases([{**r, "step": r[X_KEY]} for r in records if r.get(X_KEY) is not None])
    xs, ys, seconds = [], [], 0.0
    for record in kept:
        seconds += (record.get("perf/train_seconds") or 0.0) + (
            record.get("perf/eval_seconds") or 0.0
        )
        if record.get(metric) is None:
            continue
        xs.append(seconds / 3600.0 if x == HOURS else record[X_KEY])
        ys.append(record[metric])
    return xs, ys


def spans(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[np.ndarray, ...]:
    """Every x of any curve, each curve interpolated there, and where each curve reaches.

    Returns:
        x [N], values [curves, N] (NaN outside a curve's own range), present [curves, N].
    """
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        return np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0), bool)
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    present = np.stack([(grid >= x[0]) & (grid <= x[-1]) for x, _ in curves])
    values = np.where(present, np.stack([np.interp(grid, x, y) for x, y in curves]), np.nan)
    return grid, values, present


def seed_band(
    curves: Sequence[tuple[Sequence[float], Sequence[float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lowest and highest of several seeds' curves, at each x over the seeds there.

    The curves are interpolated linearly onto every x value of any curve, each within its
    own range only, so seeds evaluated at the same steps are not moved at all, and a seed
    still training, or seeds that ran at different speeds (against wall-clock), keep all
    their points: past a seed's last point the band is the others'. (The band over the
    range all seeds shared cut a sweep to its slowest seed, and to nothing by hours when
    a later seed's compiles were cached.)

    Args:
        curves: (x, y) of each seed, x increasing.

    Returns:
        x, mean, low, high: [N] each; NaN at an x between points no seed spans both of.
    """
    grid, values, present = spans(curves)
    if not len(grid):
        return grid, grid, grid, grid
    band = [grid, np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)]
    # Between points no seed spans, a gap (NaN), not a line from one seed to another.
    apart = np.flatnonzero(~(present[:, 1:] & present[:, :-1]).any(0)) + 1
    middle = (grid[apart - 1] + grid[apart]) / 2
    grid, mean, low, high = (np.insert(row, apart, np.nan) for row in band)
    grid[apart + np.arange(len(apart))] = middle
    return grid, mean, low, high


def alone(values: np.ndarray) -> np.ndarray:
    """The indices of the points no line reaches: a value with a gap (NaN) or an end each side.

    A line of them draws nothing; `plot` marks them (a curve of one point, or seeds whose
    points by hours no other seed's range spans).
    """
    finite = np.isfinite(np.asarray(values, float))
    before = np.concatenate([[False], finite[:-1]])
    after = np.concatenate([finite[1:], [False]])
    return np.flatnonzero(finite & ~before & ~after)


def seed_count(members: Sequence[list[dict[str, Any]]], metrics: Sequence[str], x: str) -> str:
    """How many seeds a group's curves average at their x values: `3 seeds` or `1-3 seeds`.

    A seed with no point of a metric yet is none of its (a run of a sweep still before its
    first evaluation has train returns and no eval returns); nor is a seed at an x outside
    its range (by hours, seeds whose compiles were cached part).
    """
    counts: set[int] = set()
    for metric in metrics:
        _, _, present = spans([series(member, metric, x) for member in members])
        counts.update(int(count) for count in present.sum(0))
    if max(counts, default=0) <= 1:
        return "1 seed"
    number = str(min(counts)) if len(counts) == 1 else f"{min(counts)}-{max(counts)}"
    return f"{number} seeds, mean and range"


def groups(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[list[dict[str, Any]]]]:
    """Runs grouped by their folder name's config part (`seed0-cheetah` -> `cheetah`)."""
    grouped: dict[str, list[list[dict[str, Any]]]] = {}
    for label, records in runs.items():
        grouped.setdefault(run_folder.parse(Path(label).name)[1], []).append(records)
    return grouped


def quantity(metric: str) -> str:
    """What a metric measures, its key's last part: `return` for train/ and eval/return."""
    return metric.rsplit("/", 1)[-1]

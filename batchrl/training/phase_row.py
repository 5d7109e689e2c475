"""A phase's row of metrics: the keys its parts take, and those it holds only sometimes.

A row (one a phase, in metrics.jsonl, TensorBoard and the terminal) holds the train
episodes' summary as `train/...`, the evaluation's as `eval/...`, the algorithm's
metrics, and in the final phase `final/...`. Solo and together runs build theirs alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchrl import algorithm as algorithm_lib


def drop_update_metrics(row: dict[str, float], algorithm: algorithm_lib.Algorithm) -> None:
    """Leaves out of the row of a phase that trained no update the metrics updates write.

    They are the last update's (zeros before the first), not the phase's: a row holds a
    loss only where an update computed it, as Stable-Baselines3 logs one.
    """
    for name in algorithm.update_metrics:
        row.pop(name, None)


def summary_as(part: str, summary: dict[str, Any]) -> dict[str, Any]:
    """A simulation summary's `episode/...` keys as a phase row's `<part>/...` ones."""
    return {f"{part}/{name.split('/')[1]}": value for name, value in summary.items()}


def add_final(metrics: dict[str, float], average_with: Sequence[Any] | None) -> None:
    """Adds the final phase's `final/...` keys to its `metrics`, which hold its evaluation."""
    metrics["final/return"] = metrics["eval/return"]
    metrics["final/episodes"] = metrics["eval/count"]
    if average_with is not None:
        metrics["final/averaged_phases"] = float(len(average_with) + 1)


def add_perf(
    row: dict[str, float],
    env_steps: int,
    phase_steps: int,
    train_seconds: float,
    eval_seconds: float,
) -> None:
    """The phase's `perf/` keys: the env steps after it, its train speed and times."""
    row["perf/env_steps"] = float(env_steps)
    row["perf/env_steps_per_sec"] = phase_steps / train_seconds
    row["perf/train_seconds"] = train_seconds
    row["perf/eval_seconds"] = eval_seconds

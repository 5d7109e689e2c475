"""What a run folder says about learning: its evaluation curve, final return and wall-clock.

A run's metrics.jsonl holds one row per train phase. A resumed run may repeat phases
(it restarts from its last checkpoint, which can be older than its last row): the rows
it re-did replace the earlier ones, so `phases` gives each phase once, in order. The
wall-clock of a run is the sum of its phases' train and eval seconds, compilation
included; the seconds of re-done phases are counted once, as their last run took them.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Sequence
from typing import Any

from batchrl.training import checkpoint, metrics_log, run_folder, session


@dataclasses.dataclass(frozen=True)
class Summary:
    """One run's learning results: returns of the policy as its evaluations scored it.

    That is its mean action (deterministic), or sampled actions where the run's config
    sets `eval_sample` (a sweep's line then carries "sampled": true).
    """

    env_steps: int
    finished: bool  # The final policy was evaluated: the run spent its budget.
    final_return: float | None  # The final policy's mean return over `final_episodes`.
    final_episodes: int | None
    best_eval_return: float | None  # The best evaluation along training.
    mean_last_5_eval_return: float | None
    wall_seconds: float  # Train and eval phases, compilation included.
    eval_seconds: float
    env_steps_per_sec: float  # Env steps over wall_seconds, evaluation included.
    eval_curve: list[tuple[int, float, float]]  # (env steps, return, wall seconds so far)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def phases(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of each phase once, in order: a re-done phase's last row replaces the earlier."""
    kept: list[dict[str, Any]] = []
    for row in rows:
        step = row.get("step")
        if step is None:
            continue
        while kept and kept[-1]["step"] >= step:
            kept.pop()
        kept.append(row)
    return kept


def summarize(rows: Sequence[dict[str, Any]]) -> Summary:
    """The learning results of a run from its metrics rows (see `metrics_log.read_jsonl`)."""
    kept = phases(rows)
    wall = eval_seconds = 0.0
    curve = []
    for row in kept:
        wall += (row.get("perf/train_seconds") or 0.0) + (row.get("perf/eval_seconds") or 0.0)
        eval_seconds += row.get("perf/eval_seconds") or 0.0
        value = row.get("eval/return")
        if value is not None and math.isfinite(value):
            curve.append((int(row["step"]), float(value), round(wall, 2)))
    last = kept[-1] if kept else {}
    env_steps = int(last.get("step", 0))
    returns = [value for _, value, _ in curve]
    return Summary(
        env_steps=env_steps,
        finished="final/return" in last,
        final_return=last.get("final/return"),
        final_episodes=None if last.get("final/episodes") is None else int(last["final/episodes"]),
        best_eval_return=max(returns) if returns else None,
        mean_last_5_eval_return=sum(returns[-5:]) / len(returns[-5:]) if returns else None,
        wall_seconds=round(wall, 2),
        eval_seconds=round(eval_seconds, 2),
        env_steps_per_sec=round(env_steps / wall, 1) if wall else 0.0,
        eval_curve=curve,
    )


def read(rundir: str | pathlib.Path) -> Summary:
    """The learning results of the run in `rundir`; an empty summary when it has no rows yet."""
    path = run_folder.metrics(rundir)
    return summarize(metrics_log.read_jsonl(path) if path.is_file() else [])


def checkpointed(rundir: str | pathlib.Path) -> bool:
    """Whether the last phase of the run's rows has its checkpoint in the folder.

    A phase's row is written before its checkpoint: one that could not be written (a
    full disk) leaves a row, and a finished run's final return, of a phase that a resume
    trains again.
    """
    path = run_folder.metrics(rundir)
    rows = phases(metrics_log.read_jsonl(path)) if path.is_file() else []
    return len(rows) in checkpoint.steps(run_folder.checkpoints(rundir))


def line(rundir: pathlib.Path) -> dict[str, Any]:
    """The run's learning line, as a sweep writes it less the sweep's own fields.

    Its config is the folder's name part (`<timestamp>-<config>`: a together-run's
    `T-seed0-pendulum_jax` is `pendulum_jax`), its seed the saved config's.
    """
    config = run_folder.read_config(rundir)
    sampled = {"sampled": True} if config.eval_sample else {}
    named = {"benchmark": "learning", "config": run_folder.parse(rundir.name)[1]}
    settings = {"settings": dataclasses.asdict(config)}
    commit = session.commit_of(rundir)
    learned = {**named, "seed": config.seed, **read(rundir).as_dict(), **sampled, **settings}
    return {**learned, **({"commit": commit} if commit else {})}

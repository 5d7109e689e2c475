"""What a run keeps of its phases in its folder, and what a resume restores from it.

`Keeper` writes each phase's row, checkpoint and best state (and the tail of parameters
a final policy averages); `restore` places the newest good checkpoint into a freshly
built state and writes `best.bin` again where an interrupt left it unwritten. Solo and
together runs (`run`, `together_run`) keep their phases through these.
"""

from __future__ import annotations

import collections
import logging
import math
import pathlib
from typing import Any

import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl.configs import TrainConfig, flat
from batchrl.envs import space_data
from batchrl.parts import episode_memory
from batchrl.training import (
    checkpoint,
    kept_best,
    loop,
    metrics_log,
    results,
    run_folder,
    tail_average,
    terminal,
)

logger = logging.getLogger("batchrl.training")
_STORAGE = kept_best.STORAGE  # Left out of `best.bin`, and of a checkpoint while empty.


class Keeper:
    """What one run keeps of its phases: rows, logs, checkpoints, the best state, the tail.

    The tail is the parameters of its last `average_last` - 1 phases, for the final
    policy's mean. `logged` is the state whose metrics row is written: an interrupt
    between a phase's return and its row must not checkpoint that phase, or a resumed
    run would lack the row for good. What its checkpoint leaves out is found with it, so
    that an interrupt's checkpoint runs no JAX computation: an interrupt that lands in
    JAX's dispatch can leave its caches unusable by that thread (a RecursionError).
    """

    def __init__(
        self,
        rundir: pathlib.Path | None,
        config: TrainConfig,
        state: loop.RunState,
        algorithm: algorithm_lib.Algorithm,
    ):
        self.rundir, self.config, self.algorithm = rundir, config, algorithm
        self.directory = None if rundir is None else run_folder.checkpoints(rundir)
        self.best = -math.inf if rundir is None else kept_best.best_return(rundir, state)
        # TensorBoard drops the rows past the state it re-does them from: past a checkpoint,
        # or all of them when the run starts again with rows but no checkpoint (killed first).
        written = rundir is not None and run_folder.metrics(rundir).exists()
        redone = int(state.env_steps) + 1 if int(state.phases) or written else None
        self.writer = None if rundir is None else metrics_log.Writer(rundir, redone)
        if self.writer is not None and redone is None:  # Once, at the run's start.
            self.writer.write_text("config", settings_table(config))
        self.rows: list[dict[str, float]] = []
        self.kept = (state, {} if self.directory is None else _form(self.algorithm, state))
        self.tail = collections.deque(maxlen=config.average_last - 1)
        self.tail.extend(_earlier_params(self.directory, state, config))
        if int(state.phases):
            self.tail.append(tail_average.params(state.agent))

    def __enter__(self) -> Keeper:
        if self.writer is not None:
            self.writer.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.writer is not None:
            self.writer.__exit__(*exc_info)

    def average_with(self, final: bool) -> list | None:
        """The earlier phases' parameters the final phase's policy averages; None before it."""
        return list(self.tail) if final and self.config.average_last > 1 else None

    def record(self, state: loop.RunState, metrics: dict[str, float]) -> int:
        """Keeps the phase that left `state`: its row, checkpoint, best; returns its env steps."""
        self.tail.append(tail_average.params(state.agent))
        done, env_steps = int(state.phases), int(state.env_steps)
        form = {} if self.directory is None else _form(self.algorithm, state)  # Before the row.
        if self.writer is not None:
            self.writer.write(env_steps, metrics)
        self.rows.append({"step": env_steps, **metrics})
        self.kept = (state, form)  # One store: an interrupt sees the pair or the one before.
        score = metrics.get("eval/return", math.nan)
        if metrics.get("eval/count", 0) > 0 and not math.isfinite(score):
            logger.warning(
                "phase %d's evaluation (seed %d) of %d episodes returned %s: the env's rewards "
                "under evaluation were not finite; none of it is kept as the best",
                done,
                self.config.seed,
                metrics["eval/count"],
                score,
            )
        if self.directory is not None:
            # False for NaN, a phase not evaluated (no episode ended), and for infinities.
            best = math.isfinite(score) and score > self.best
            every = done % self.config.checkpoint_every == 0 or done == self.config.phases
            if best or every:
                self.writer.sync()  # A checkpoint on disk has its rows on disk before it.
            # The best first: a kill between the two then re-does this phase, best and all.
            if best:
                checkpoint.save_best(self.directory, done, state, _STORAGE, score)
                self.best = score
            if every:
                checkpoint.save(self.directory, done, state, self.config.keep_checkpoints, **form)
        return env_steps

    def updated(self) -> bool:
        """Whether the run trained an update: in this call's rows, or its folder's."""
        path = None if self.rundir is None else run_folder.metrics(self.rundir)
        if path is not None and path.exists():
            return _updated(results.phases(metrics_log.read_jsonl(path)))
        return _updated(self.rows)

    def save_stopped(self) -> None:
        """Checkpoints the last logged state, where a callback stopped the run."""
        if self.directory is None:
            return
        logged, form = self.kept
        done = int(logged.phases)
        if done not in checkpoint.steps(self.directory):  # Between `checkpoint_every`s.
            checkpoint.save(self.directory, done, logged, self.config.keep_checkpoints, **form)
        terminal.say(f"stopped by the callback at env step {int(logged.env_steps):,}\n")

    def save_interrupted(self) -> None:
        """Checkpoints the last logged state, on Ctrl-C or SIGTERM, and says in which folder.

        The folder is what a resume takes (`batchrl.resume(rundir)`, or its timestamp).
        Before a run's first phase ended it saves nothing: a run folder without a
        checkpoint starts again where the run began, as its checkpoint would.
        """
        logged, form = self.kept
        done = int(logged.phases)
        if self.directory is None or done == 0:
            return
        # Written as the phase ended, unless between `checkpoint_every`s: not again, which
        # would cost a large preset's time and fail where its disk has no room for two.
        if done not in checkpoint.steps(self.directory):
            checkpoint.save(self.directory, done, logged, self.config.keep_checkpoints, **form)
        steps = int(logged.env_steps)
        terminal.say(f"interrupted: saved a checkpoint at env step {steps:,} in {self.rundir}\n")

    @property
    def logged(self) -> loop.RunState:
        """The state whose metrics row was written last, or the one the run began with."""
        return self.kept[0]


def settings_table(config: TrainConfig) -> str:
    """Every setting of the run and its value, as a Markdown table for TensorBoard."""
    rows = [
        f"| {name} | {str(value).replace('|', '&#124;')} |" for name, value in flat(config).items()
    ]
    return "\n".join(["| setting | value |", "| --- | --- |", *rows])


def restore(
    rundir: pathlib.Path | None, programs: loop.Programs, state: loop.RunState, spec: Any
) -> loop.RunState:
    """The run folder's newest good checkpoint placed as `state` is; `state` when none.

    Writes the env's spec (and its spaces) into the folder once its checkpoints load (a
    resume refused for an edited config left the other env's spec, and the folder would
    not load when put back). Checkpoints of which none loads are a CheckpointError that
    says what to do.
    """
    if rundir is None:
        return state
    run_folder.remove_partial_files(rundir)  # A killed run's; this one holds the folder.
    # A row it was writing: cut here, said once, before the readers below would skip it.
    metrics_log.drop_partial_line(run_folder.metrics(rundir))
    directory = run_folder.checkpoints(rundir)
    try:
        restored = checkpoint.load_latest(directory, state)
    except checkpoint.CheckpointError as error:  # What to do, after what is wrong.
        # Every checkpoint of another structure: the config that shapes the state changed.
        edited = ": structure mismatch" in str(error)
        config = f"put back what was changed in {run_folder.CONFIG}, or " if edited else ""
        raise checkpoint.CheckpointError(
            f"{error}; {config}move {str(directory)!r} away to train the run again from its start"
        ) from None
    run_folder.write_spec(rundir, spec)
    if spec.spaces is not None:  # Gymnasium's spaces, which a loaded policy tells.
        run_folder.write_spaces(rundir, space_data.pair_to_data(spec.spaces))
    if restored is None:
        _say_rows_replaced(rundir)
        kept_best.set_aside_later(rundir, 0)
        return state
    _set_aside_newer(directory, restored[0])
    kept_best.set_aside_later(rundir, restored[0])
    state = loop.place(programs, restored[1])
    _say_rows_missing(rundir, int(state.env_steps))
    kept_best.keep_best_of(rundir, state)
    return state


def say_resumed(rundir: pathlib.Path | None, state: loop.RunState) -> None:
    """The line of a run resumed from its checkpoint, once it is known to train on.

    Said by `restore`, it came before a refusal of the resume, or before "has trained all
    its phases".
    """
    if rundir is not None and int(state.phases):
        logger.warning(
            "resumed %s at env step %s (phase %d)",
            rundir.name,
            f"{int(state.env_steps):,}",
            int(state.phases),
        )


def _set_aside_newer(directory: pathlib.Path, step: int) -> None:
    """Renames the checkpoints past `step`, which did not load, out of the run's way.

    Left among its checkpoints, they were newer than every one it wrote: 3 of them (another
    run's, or files of 0 bytes) rotated away each checkpoint the resumed run saved, and
    the one it resumed from. Kept as `skipped-ckpt-...` for whoever wants to look.
    """
    for newer in [found for found in checkpoint.steps(directory) if found > step]:
        path = checkpoint.path_for(directory, newer)
        path.rename(path.with_name(f"skipped-{path.name}"))
        logger.warning("set aside %s, which does not load, as skipped-%s", path, path.name)


def _say_rows_missing(rundir: pathlib.Path, env_steps: int) -> None:
    """Says so where the rows end before the checkpoint resumed: those phases have none.

    A run writes each phase's row before its checkpoint; a folder copied while its run
    trained (rows first, checkpoints a moment later) resumed past rows it lacked.
    """
    path = run_folder.metrics(rundir)
    rows = results.phases(metrics_log.read_jsonl(path)) if path.exists() else []
    last = rows[-1]["step"] if rows else 0
    if last < env_steps:
        logger.warning(
            "%s's rows end at env step %d, before its checkpoint's %d: the phases between "
            "have no rows (was the folder copied while its run trained?)",
            run_folder.METRICS,
            last,
            env_steps,
        )


def _say_rows_replaced(rundir: pathlib.Path) -> None:
    """Says so where rows of phases stand in a folder of no checkpoint: the run redoes them.

    Killed before its first checkpoint (`checkpoint_every` > 1), or its checkpoints deleted.
    """
    path = run_folder.metrics(rundir)
    rows = results.phases(metrics_log.read_jsonl(path)) if path.exists() else []
    if rows:
        held = "1 phase's row" if len(rows) == 1 else f"{len(rows)} phases' rows"
        logger.warning(
            "%s holds %s but no checkpoint: the run trains again from its start and writes "
            "them anew",
            rundir.name,
            held,
        )


def _form(algorithm: algorithm_lib.Algorithm, state: loop.RunState) -> dict[str, Any]:
    """How a checkpoint of `state` keeps its storage (`checkpoint.save`'s keywords).

    An emptied storage is left out, rebuilt on resume; an episode memory is kept with the
    steps it holds, not its padding.
    """
    if not bool(np.any(algorithm.holds_steps(state.agent))):
        return {"fresh": _STORAGE}
    if isinstance(state.agent.storage, episode_memory.MemoryState):
        return {"held": _STORAGE}
    return {}


def _earlier_params(
    directory: pathlib.Path | None, state: loop.RunState, config: TrainConfig
) -> list:
    """The parameters of the kept phases before `state`'s that its final policy averages.

    A resumed run's last phases average these with their own (`tail_average`); a fresh
    run, or one without a folder, has none. Only phases of the final average are read,
    the newest first and without a gap: a checkpoint that does not load ends them, said
    in one line, and the final policy averages fewer phases, as its row says.
    """
    done, count = int(state.phases), config.average_last
    if directory is None or count < 2 or not done:
        return []
    target = tail_average.params(state.agent)
    part = ("agent", "learner", "params")
    kept = []
    for phase in range(done - 1, max(done - count + 1, config.phases - count + 1, 1) - 1, -1):
        try:
            kept.append(checkpoint.load(checkpoint.path_for(directory, phase), target, part))
        except checkpoint.CheckpointError as error:  # A missing file is one too.
            averaged = len(kept) + 1 + config.phases - done
            logger.warning(
                "%s: the final policy averages its last %d phases, not %d", error, averaged, count
            )
            break
    return kept[::-1]


def _updated(rows: list[dict[str, Any]]) -> bool:
    """Whether any of the phases' `rows` trained an update: its loss is in the row."""
    return any(row.get("train/kl") is not None for row in rows)

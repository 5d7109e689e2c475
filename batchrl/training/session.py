"""What each session that trains a run folder records: its code's commit and its settings.

A run folder's `session.json` names the commit of the code that last trained it, which
`table` prints beside its results, and the settings it trained with. A resume trains
the settings its last session did: the command refuses other ones given with `--set`,
and `check` refuses those of a config.yaml edited by hand in between, but for a budget
raised where no schedule runs over it (`check_raised_budget`, which judges `--set steps`
too) and the settings a resume may give anew (`train_config.RESUME_MAY_CHANGE`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

from batchrl.configs import TrainConfig, train_config
from batchrl.training import checkpoint, file_writes, run_folder

# The clipped objective's schedules over `steps`: a raised budget would change them.
SCHEDULES = ("anneal_learning_rate", "final_discount")


def check_raised_budget(name: str, saved: TrainConfig, steps: int) -> None:
    """A one-line ValueError unless `steps` raises the budget of run `name`, which may go on.

    A run trains the same updates with a larger budget, but for the clipped objective's
    schedules (`SCHEDULES`), whose clock is the budget.
    """
    if steps < saved.steps:
        raise ValueError(
            f"run {name!r} has a budget of steps={saved.steps}: a resume may raise it, "
            f"not lower it to {steps}"
        )
    for setting in SCHEDULES:
        if getattr(saved.algorithm, setting, None) not in (None, False):
            raise ValueError(
                f"run {name!r} sets {setting}, a schedule over its steps={saved.steps}: "
                "a larger budget would change the updates it trained; start a new run"
            )


# Settings one session may train with where the last did not: a budget, raised where no
# schedule runs over it (`check_raised_budget`), and how and where a run goes on.
_MAY_CHANGE = frozenset({"steps", *train_config.RESUME_MAY_CHANGE})


@functools.cache
def commit() -> str | None:
    """The git commit of batchrl's source, with "-dirty" when changed; None outside git.

    Asked once a process: the code a process runs is the code it imported. Only batchrl's
    own checkout counts: installed into a virtual environment inside a project's
    repository, batchrl is not that repository's commit.
    """
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        described = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return described.stdout.strip() or None


def check(rundir: pathlib.Path | None, config: TrainConfig) -> None:
    """Refuses `config` where it is not the settings the run's last session trained with.

    Call as the folder is taken, before any env or program is built. A RunFolderError
    names each setting its config.yaml was edited in since the last session kept a
    checkpoint; a setting one of them lacks (added to batchrl or dropped from it in
    between) is not compared.
    """
    last = _read(rundir).get("settings") if rundir is not None else None
    # A run with no checkpoint starts again from its start: its settings are free to mend.
    if not isinstance(last, dict) or not checkpoint.steps(run_folder.checkpoints(rundir)):
        return
    settings = _settings(config)
    if isinstance(last.get("steps"), int) and settings["steps"] > last["steps"]:
        try:  # A budget raised in the file, judged as one given with `--set steps`; one
            # lowered past the phases trained is `run.check_not_lowered`'s to refuse.
            trained = train_config.replace(config, steps=last["steps"])
            check_raised_budget(rundir.name, trained, config.steps)
        except ValueError as error:
            raise run_folder.RunFolderError(
                f"{rundir / run_folder.CONFIG} was edited since run {rundir.name!r} last "
                f"trained: {error}"
            ) from None
    edited = [
        f"{name}={settings.get(name)!r} (trained with {last.get(name)!r})"
        for name in sorted((settings.keys() & last.keys()) - _MAY_CHANGE)
        if settings.get(name) != last.get(name)
    ]
    if edited:
        raise run_folder.RunFolderError(
            f"{rundir / run_folder.CONFIG} was edited since run {rundir.name!r} last "
            f"trained: {', '.join(edited)}; put it back, or train the new settings as a "
            f"new run (--config {rundir / run_folder.CONFIG})"
        )


@contextlib.contextmanager
def edits_named(rundir: pathlib.Path, config: TrainConfig) -> Iterator[None]:
    """A checkpoint that does not load in the block, refused as `check` refuses edits if any.

    A structure error names an array of the agent; a config.yaml edited since the run
    trained (`num_envs`, layers) is why, said as a resume says it.
    """
    try:
        yield
    except checkpoint.CheckpointError:
        check(rundir, config)
        raise


def begin(rundir: pathlib.Path | None, config: TrainConfig) -> None:
    """Records a raised budget and this session's commit and settings, atomically.

    Call once the run is restored and has phases to train: a failed resume, or a finished
    run opened again, leaves the last session's record.
    """
    if rundir is None:
        return
    run_folder.record_budget(rundir, config)
    record = {"commit": commit(), "settings": _settings(config)}
    file_writes.write_atomic(rundir / run_folder.SESSION, json.dumps(record) + "\n")


def commit_of(rundir: pathlib.Path) -> str | None:
    """The commit of the code that last trained the run; None where none was recorded."""
    recorded = _read(rundir).get("commit")
    return recorded if isinstance(recorded, str) else None


def _settings(config: TrainConfig) -> dict[str, Any]:
    """Every setting by name, as JSON reads them back: tuples as lists."""
    return json.loads(json.dumps(train_config.flat(config), default=repr))


def _read(rundir: pathlib.Path) -> dict[str, Any]:
    """The folder's last session record; empty where there is none (runs before them)."""
    try:
        record = json.loads((rundir / run_folder.SESSION).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}

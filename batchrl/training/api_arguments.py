"""The arguments of `batchrl.train` and `batchrl.resume`, checked before any folder exists.

Each bad one is a one-line error that names it and what the function takes.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import reprlib
from collections.abc import Sequence
from typing import Any

from batchrl.configs import train_config
from batchrl.training import run_folder


def check_seeds(seeds: Any) -> list[int]:
    """`seeds` as a list, or a one-line ValueError: at least one, each once (a folder each)."""
    try:
        if isinstance(seeds, str | bytes):  # "012": its characters were read as seeds.
            raise TypeError(seeds)
        seeds = list(seeds)
    except TypeError:  # seeds=5: a count of seeds, or one seed, meant.
        raise ValueError(f"seeds is a list of seeds such as [0, 1, 2], got {seeds!r}") from None
    seeds = [train_config.typed("seed", int, seed) for seed in seeds]  # np.arange(3)'s as ints.
    twice = sorted(seed for seed, count in collections.Counter(seeds).items() if count > 1)
    if not seeds or twice:
        given = seeds if len(seeds) <= 20 else f"{len(seeds)} seeds"
        why = "none given" if not seeds else f"{twice[:20]} given twice"
        raise ValueError(f"seeds must be one or more distinct seeds, got {given}: {why}")
    return seeds


def rundirs(rundir: Any) -> list[pathlib.Path]:
    """The run folders `resume` was given, or a one-line error naming what it got instead."""
    if isinstance(rundir, str | os.PathLike):
        return [pathlib.Path(rundir)]
    if rundir is None:  # `run.rundir` of a run trained with logdir=None.
        raise run_folder.RunFolderError(
            "rundir is None: a run trained with logdir=None has no folder to resume from"
        )
    paths = isinstance(rundir, Sequence) and not isinstance(rundir, bytes)
    if paths and rundir and all(isinstance(one, str | os.PathLike) for one in rundir):
        return [pathlib.Path(one) for one in rundir]
    got = reprlib.repr(rundir)
    if hasattr(rundir, "rundir"):  # A `Run`, whose repr holds every metrics row.
        got = f"a {type(rundir).__name__}: give its rundir"
    raise ValueError(f"rundir is a run folder's path, or a list of a together-run's; got {got}")


def check_callback(callback: Any) -> None:
    """A one-line ValueError for a callback that cannot be called, before any folder exists."""
    if callback is not None and not callable(callback):
        raise ValueError(
            f"callback is a function of each phase's metrics row, or None; got {callback!r}"
        )


def check_logdir(logdir: str | os.PathLike | None) -> None:
    """A one-line ValueError for a logdir that is no folder of runs.

    One of no name put runs in the working folder; a run's own folder held the new run
    inside it, where `evaluate`, `plot` and `table` of that folder did not see it.
    """
    if logdir is None:
        return
    if not isinstance(logdir, str | os.PathLike):
        raise ValueError(f"logdir is a folder's path, or None to keep no folder; got {logdir!r}")
    if not os.fspath(logdir):
        raise ValueError("logdir '' names no folder: give one, or None to keep no run folder")
    if (pathlib.Path(logdir) / run_folder.CONFIG).is_file():
        parent = str(pathlib.Path(logdir).resolve().parent)
        raise ValueError(
            f"logdir {os.fspath(logdir)!r} is a run's folder (it holds {run_folder.CONFIG}): "
            f"give the folder that holds runs, such as {parent!r}"
        )


def check_new_timestamp(logdir: str | os.PathLike, timestamp: str, name: str, seed: int) -> None:
    """A one-line ValueError for a new solo run's timestamp that another run's folders hold.

    The seeds of a together-run stamped `timestamp` (a resume that left out `--seeds`
    started a new seed-0 run beside them), or a timestamp naming another seed than the
    run's (`T-seed1` for seed 0), which `stats` and `plot` would then file under a seed
    it does not train.
    """
    logdir = pathlib.Path(logdir)
    together = sorted(
        int(match.group(1))
        for path in (logdir.iterdir() if logdir.is_dir() else [])
        if (
            match := re.fullmatch(rf"{re.escape(timestamp)}-seed(\d+)-{re.escape(name)}", path.name)
        )
    )
    if together:
        seeds = " ".join(map(str, together))
        raise ValueError(
            f"run {timestamp!r} of {name} trained seeds {seeds} together: resume them with "
            f"--seeds {seeds} (a list of their folders to batchrl.resume), or give a new run "
            "another timestamp"
        )
    named = re.search(r"(?:^|-)seed(\d+)$", timestamp)
    if named and int(named.group(1)) != seed:
        raise ValueError(
            f"timestamp {timestamp!r} names seed {named.group(1)}, and the run's seed is "
            f"{seed}: give seed={named.group(1)} (--seed {named.group(1)}) or another timestamp"
        )


def seed_timestamp(timestamp: str, seed: int) -> str:
    """The timestamp of seed `seed`'s folder in a together-run stamped `timestamp`."""
    others = timestamp.replace("{seed}", "")
    if "{" in others or "}" in others:  # Another field, or a lone brace: `a{seed`.
        raise ValueError(
            f"--timestamp {timestamp!r}: a together-run's timestamp may hold {{seed}}, and no "
            "other braces"
        )
    if others != timestamp:
        return timestamp.replace("{seed}", str(seed))
    if named := re.fullmatch(r"(.+)-seed(\d+)", timestamp):  # `T-seed1-seed0-...` was made.
        raise ValueError(
            f"--timestamp {timestamp!r} names seed {named[2]}'s folder of together-run "
            f"{named[1]!r}: resume the run with --timestamp {named[1]} and its --seeds, or "
            f"seed {named[2]} alone with --seed {named[2]}"
        )
    return f"{timestamp}-seed{seed}"

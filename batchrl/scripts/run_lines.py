"""The learning lines of runs, as `stats` and `table` count them.

A sweep writes one JSON line per run (`results.jsonl`); run folders (a `train --seeds`
logdir's) give the same line, made from each folder (`results.line`). A run finished
to its budget is counted; one listed again counts its last line, said in a note, as is
a run left out for not having finished.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from batchrl.scripts import json_lines, variants
from batchrl.training import results, run_folder


def finished(paths: Sequence[pathlib.Path]) -> list[tuple[str, dict]]:
    """(where, line) of every finished run's learning line in `paths`, in their order."""
    return [
        (where, record)
        for path in paths
        for where, record in records(path)
        if _learning(record) and record.get("finished")
    ]


def replaced(paths: Sequence[pathlib.Path]) -> list[str]:
    """Notes of runs a later file lists again, whose earlier file's lines `stats.read` leaves out.

    One note a pair of files, naming their runs: `stats runs/results.jsonl tog/results.jsonl`
    counted only the second file's seeds 0-2, the first's without a word.
    """
    name = variants.namer(record for _, record in finished(paths))
    where: dict[tuple[str, int], pathlib.Path] = {}
    moved: dict[tuple[pathlib.Path, pathlib.Path], list[str]] = {}
    twice = []  # Two run folders of one config and seed in one folder: one was dropped.
    for path in paths:
        folders: dict[tuple[str, int], str] = {}
        for at, record in records(path):
            if _learning(record) and record.get("finished"):
                run = (name(record), int(record["seed"]))
                if where.get(run, path) != path:
                    moved.setdefault((where[run], path), []).append(f"{run[0]} seed {run[1]}")
                where[run] = path
                if run in folders:
                    twice.append(
                        f"{folders[run]} and {at} are both {run[0]} seed {run[1]}: the last counts"
                    )
                if _of_folders(path):
                    folders[run] = at
    return twice + [
        f"{len(runs)} run(s) of {old} are listed again in {new}, whose lines count "
        f"(a run listed twice counts its last line): {', '.join(dict.fromkeys(runs))}"
        for (old, new), runs in moved.items()
    ]


def unfinished(paths: Sequence[pathlib.Path]) -> list[str]:
    """Notes of the runs left out as unfinished (killed, or training still), by where.

    A run a line of another file says finished (a sweep's line once it ran on) is not one;
    a finished run of the same config's name and seed but other settings (`variants`),
    counted apart, is.
    """
    lines = [line for path in paths for line in records(path) if _learning(line[1])]
    name = variants.namer(line for _, line in lines)
    done = {(name(line), line["seed"]) for _, line in lines if line.get("finished")}
    return [
        f"{where} is left out: it stopped at env step {line.get('env_steps', 0):,}, "
        "before its budget (resume it to count it)"
        for where, line in lines
        if not line.get("finished") and (name(line), line["seed"]) not in done
    ]


def _learning(line: dict) -> bool:
    return line.get("benchmark") == "learning"


def _of_folders(path: pathlib.Path) -> bool:
    """Whether `records` makes `path`'s lines from run folders, not from JSON lines."""
    return path.is_dir() and not (path / "results.jsonl").is_file()


def records(path: pathlib.Path) -> list[tuple[str, dict]]:
    """(where, line) of each run `path` gives: a file's JSON lines, or a folder's runs.

    A folder is a sweep's (its results.jsonl), a run folder, or a folder of run folders
    (`train --seeds`'s logdir): each run's line is made from its folder (`results.line`).

    Raises:
        ValueError: for a path that does not exist, or a folder that holds neither runs nor
            results.jsonl.
    """
    if not path.exists():
        raise ValueError(
            f"{str(path)!r} does not exist: give a sweep's results.jsonl, its folder, run "
            "folders or the folder that holds them"
        )
    if not path.is_dir():
        return [(f"{path}:{number}", record) for number, record in json_lines.read(path)]
    if (path / "results.jsonl").is_file():
        return records(path / "results.jsonl")
    inside = [path] if run_folder.metrics(path).is_file() else sorted(path.iterdir())
    rundirs = [folder for folder in inside if run_folder.metrics(folder).is_file()]
    if not rundirs:
        raise ValueError(
            unkept(path)
            or (
                f"{path} holds no run folder and no results.jsonl: give a sweep's results.jsonl, "
                "its folder, run folders or the folder that holds them"
            )
        )
    return [(str(rundir), results.line(rundir)) for rundir in rundirs]


def unkept(folder: pathlib.Path) -> str | None:
    """The line for a run folder, or a folder of them, with no metrics.jsonl yet, or None.

    A run writes its config at start and its first metrics line when its first phase is
    kept: a folder of runs started and not yet there is no folder of something else.
    """
    if (folder / run_folder.CONFIG).is_file():
        return f"run folder {folder} has no {run_folder.METRICS} yet"
    started = run_folder.runs_in(folder) if folder.is_dir() else []
    if not started:
        return None
    names = ", ".join(run.name for run in started[:3]) + (", ..." if len(started) > 3 else "")
    return f"the run folders in {folder} ({names}) have no {run_folder.METRICS} yet"

"""A run folder's layout: its name, config, env spec, metrics and checkpoints, in one place.

    LOGDIR/<timestamp>-<config>/
        config.yaml             the run's TrainConfig, written before anything else
        env_spec.json           the env's spaces as the policy reads them, written at start
        spaces.json             the env's Gymnasium spaces, where it has them, likewise
        session.json            the commit and settings of the session that last trained it
        metrics.jsonl           one row per train phase (and TensorBoard's event files)
        checkpoints/ckpt-<phase>.bin, checkpoints/best.bin

A folder is named `<timestamp>-<config>`, where the config part holds no "-", so a name
splits at its last "-": a timestamp may hold one (`--timestamp 2026-11-22`), and a
sweep's runs use `seed<seed>` as theirs. The command, `batchrl.train`, `batchrl.load`
and every script read and write folders through this module. Files are written to a
temporary name and renamed, so a folder never holds half a file, and one process at a
time trains a folder (`held`). Imports no JAX.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import pathlib
import re
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from batchrl import env_spec as env_spec_lib
from batchrl.configs import overrides, train_config
from batchrl.training import file_writes

CONFIG = "config.yaml"
SPEC = "env_spec.json"
SPACES = "spaces.json"
SESSION = "session.json"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
BEST = "best.bin"
TIMESTAMP_FORMAT = "%Y%m%dT%H%M%S"
_CONFIG_NAME = re.compile(r"[A-Za-z0-9_.]+")


class RunFolderError(ValueError):
    """A run folder that is missing or cannot be read, said in one line."""


def name(timestamp: str, config: str) -> str:
    """The folder name `<timestamp>-<config>`; a ValueError for a config name with "-"."""
    if not _CONFIG_NAME.fullmatch(config):
        raise ValueError(f"a run's config name holds letters, digits, '_' and '.', got {config!r}")
    folder = f"{timestamp}-{config}"
    printable = timestamp.isprintable()  # A newline split the command's lines.
    if not timestamp or "/" in timestamp or not printable or len(folder.encode()) > 255:
        raise ValueError(
            f"a run's timestamp is a non-empty name without '/' or control characters, its "
            f"folder's name at most 255 bytes, got {timestamp!r}"
        )
    if "{seed}" in timestamp:  # A together-run's seeds fill it in; a solo run's stayed.
        raise ValueError(f"a timestamp holds {{seed}} with --seeds alone, got {timestamp!r}")
    return folder


def parse(folder: str) -> tuple[str, str]:
    """(timestamp, config) of a folder name, split at its last "-"; ("", name) without one."""
    timestamp, _, config = folder.rpartition("-")
    return timestamp, config


def safe_name(text: str) -> str:
    """A folder's config part made of any text: an env id, say (`Pendulum-v1` -> `Pendulum_v1`)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text.rpartition(":")[2]).strip("_") or "run"


def create(
    logdir: str | os.PathLike,
    config: train_config.TrainConfig,
    config_name: str,
    timestamp: str | None = None,
) -> pathlib.Path:
    """Makes the folder of a new run and writes its config; returns the folder.

    Without `timestamp`, the current time names it, with `.1`, `.2`, ... added when a run
    of the same config started in the same second. A given `timestamp` that names an
    existing folder is a FileExistsError.
    """
    logdir = pathlib.Path(logdir)
    stamp = timestamp or datetime.datetime.now().strftime(TIMESTAMP_FORMAT)
    folder = logdir / name(stamp, config_name)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # A file where the folder of runs goes, or above it.
        raise RunFolderError(
            f"logdir {str(logdir)!r} is a file, not a folder of runs: give a folder"
        ) from None
    except OSError as error:  # A read-only parent, say.
        raise file_writes.write_error(logdir, error, started=False) from error
    for count in range(1, 1000):
        try:
            folder.mkdir()
            break
        except FileExistsError:
            if timestamp is not None and (folder / CHECKPOINTS).is_dir():
                read_config(folder)  # Its config.yaml lost, beside its checkpoints: said so.
            if timestamp is not None:
                raise
            folder = logdir / name(f"{stamp}.{count}", config_name)
        except OSError as error:  # A read-only logdir, say.
            raise file_writes.write_error(folder, error, started=False) from error
    try:
        write_config(folder, config)
    except file_writes.WriteError as error:
        shutil.rmtree(folder, ignore_errors=True)  # A full disk: without a config, no resume.
        cause = error.__cause__ if isinstance(error.__cause__, OSError) else error
        raise file_writes.write_error(folder / CONFIG, cause, started=False) from None
    return folder


@contextlib.contextmanager
def removed_if_refused(rundirs: Sequence[pathlib.Path | None]) -> Iterator[None]:
    """Removes these new run folders if their run raises before it kept anything.

    A run refused once it began (a storage too large for memory, a network the frames
    do not fit) leaves no folder holding only its config, which a corrected command
    would then find and refuse as "started with other settings". Ctrl-C is no refusal.
    A file it could not write is said again with the folder gone: run the command again.
    """
    try:
        yield
    except Exception as error:
        removed = False
        for rundir in rundirs:
            if rundir is not None and not kept_anything(rundir) and _free(rundir):
                shutil.rmtree(rundir, ignore_errors=True)
                removed = True
        if removed and isinstance(error, file_writes.WriteError) and error.cause is not None:
            # Said as "resume the run (--timestamp)" of a folder no longer there.
            raise file_writes.write_error(error.path, error.cause, started=False) from None
        raise


@contextlib.contextmanager
def held(rundir: pathlib.Path | None) -> Iterator[None]:
    """Holds `rundir` while this process trains it; a RunFolderError if another does.

    Two processes training one folder (two sweeps into one logdir, a resume typed while
    the run still trains) would write over each other's checkpoints and metrics rows.
    The lock is the kernel's (`flock` on the folder itself): it goes with the process
    however that ends, SIGKILL included, and leaves no file behind. None holds nothing.
    """
    if rundir is None:
        yield
        return
    handle = os.open(rundir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(
                f"run folder {str(rundir)!r} is being trained by another process: "
                "let that run end (or stop it), then resume"
            ) from None
        except OSError:  # A file system without locks (ENOLCK): trained unguarded.
            pass
        yield
    finally:
        os.close(handle)


def busy(rundir: pathlib.Path) -> bool:
    """Whether another process trains `rundir` now (`held`): a sweep leaves that run to it."""
    try:
        with held(rundir):
            return False
    except RunFolderError:
        return True
    except FileNotFoundError:  # No folder yet: nobody trains it.
        return False


def remove_partial_files(rundir: pathlib.Path) -> None:
    """Removes the temporaries of `write_atomic`s a killed run never finished (`.*.tmp`).

    Each is as large as the file it was to become (a checkpoint); call only while the
    folder is `held`, when no write of another process can be under way.
    """
    for folder in (rundir, rundir / CHECKPOINTS):
        for path in folder.glob(".*.tmp"):
            path.unlink(missing_ok=True)


def _free(rundir: pathlib.Path) -> bool:
    """Whether no process trains `rundir` now (`held`): a held folder is not ours to remove."""
    try:
        with held(rundir):
            return True
    except (RunFolderError, FileNotFoundError):  # Held, or gone already.
        return False


def kept_anything(rundir: pathlib.Path) -> bool:
    """Whether a run folder holds a metrics row or a checkpoint."""
    metrics, checkpoints = rundir / METRICS, rundir / CHECKPOINTS
    has_rows = metrics.exists() and metrics.stat().st_size > 0
    return has_rows or (checkpoints.is_dir() and any(checkpoints.iterdir()))


def find(logdir: str | os.PathLike, timestamp: str) -> pathlib.Path:
    """The one run folder in `logdir` whose timestamp is `timestamp`; a RunFolderError else.

    The error for a together-run's timestamp names the `--seeds` its folders resume with.
    """
    logdir = pathlib.Path(logdir)
    stamps = {
        path: parse(path.name)[0]
        for path in (logdir.iterdir() if logdir.is_dir() else [])
        if path.is_dir()
    }
    found = sorted(path for path, stamp in stamps.items() if stamp == timestamp)
    if not found:
        seeds = sorted(
            int(seed)
            for before, _, seed in (stamp.rpartition("-seed") for stamp in stamps.values())
            if before == timestamp and seed.isdigit()
        )
        hint = ""
        if seeds:
            hint = f"; its seeds resume together with --seeds {' '.join(map(str, seeds))}"
        elif timestamp in {path.name for path in stamps}:  # A folder's whole name.
            hint = f"; that is a run folder's name: its timestamp is {parse(timestamp)[0]!r}"
        elif (logdir / CONFIG).is_file():
            hint = f"; {str(logdir)!r} is a run folder: give the folder that holds it as --logdir"
        raise RunFolderError(
            f"no run with timestamp {timestamp!r} in {str(logdir)!r} to resume{hint}"
        )
    if len(found) > 1:
        names = ", ".join(repr(path.name) for path in found)
        raise RunFolderError(
            f"several runs in {str(logdir)!r} have timestamp {timestamp!r} ({names}): "
            "give the --config (and --set) that started the one to resume, or its "
            f"folder (--config {found[0]})"
        )
    return found[0]


def checkpoints(rundir: str | os.PathLike) -> pathlib.Path:
    """The folder of the run's checkpoints."""
    return pathlib.Path(rundir) / CHECKPOINTS


def best(rundir: str | os.PathLike) -> pathlib.Path:
    """The run's best-evaluated state; a RunFolderError when no phase was evaluated yet."""
    path = checkpoints(rundir) / BEST
    if not path.exists():
        why = f"no phase evaluated, or {CHECKPOINTS}/{BEST} was removed"
        raise RunFolderError(f"run folder {str(rundir)!r} has no best policy: {why}")
    return path


def metrics(rundir: str | os.PathLike) -> pathlib.Path:
    """The run's metrics rows, one JSON object a line."""
    return pathlib.Path(rundir) / METRICS


def write_config(rundir: str | os.PathLike, config: train_config.TrainConfig) -> None:
    """Writes the run's config as YAML, atomically."""
    text = overrides.dump_yaml(train_config.to_dict(config))
    file_writes.write_atomic(pathlib.Path(rundir) / CONFIG, text)


def record_budget(rundir: pathlib.Path | None, config: train_config.TrainConfig) -> None:
    """Writes `config.steps` into the folder's config when a resume raised the budget.

    So that the next resume, given no `--set steps`, trains on to the raised budget. Call
    while the folder is `held`. Nothing for a folder whose config says `steps` already.
    """
    if rundir is None or not (pathlib.Path(rundir) / CONFIG).exists():
        return
    saved = read_config(rundir)
    if saved.steps != config.steps:
        write_config(rundir, dataclasses.replace(saved, steps=config.steps))


def read_config(rundir: str | os.PathLike) -> train_config.TrainConfig:
    """The config of the run in `rundir`, read without executing code; one-line errors."""
    rundir = pathlib.Path(rundir)
    if rundir.is_file():  # A checkpoint or config.yaml, as SB3 loads a model's file.
        holder = next((str(p) for p in rundir.parents if _holds_config(p)), None)
        give = f"give {holder!r}, the run folder holding it" if holder else "give a run folder"
        raise RunFolderError(f"{str(rundir)!r} is a file, not a run folder: {give}")
    if not rundir.is_dir():
        raise RunFolderError(f"run folder {str(rundir)!r} does not exist")
    path = rundir / CONFIG
    try:
        return read_config_file(path)
    except FileNotFoundError:
        runs = [str(run) for run in runs_in(rundir)]
        if runs:  # The train command's --logdir, given where one of its runs is meant.
            raise RunFolderError(
                f"{str(rundir)!r} holds {len(runs)} run folder(s), not a run: give one, "
                f"such as {runs[-1]!r}"
            ) from None
        if holder := next((str(p) for p in rundir.parents if _holds_config(p)), None):
            raise RunFolderError(f"{str(rundir)!r} is in a run folder: give {holder!r}") from None
        if (rundir / CHECKPOINTS).is_dir():  # A run's folder whose config was lost.
            raise RunFolderError(
                f"{str(path)!r} is missing, beside the run's checkpoints: put it back (a run "
                "started with the same --config, --seed and --set writes the same file)"
            ) from None
        raise RunFolderError(f"{str(path)!r} is missing: not a batchrl run folder") from None


def read_config_file(path: str | os.PathLike) -> train_config.TrainConfig:
    """A config in a YAML file as a run folder's config.yaml holds one; one-line errors."""
    try:
        # Numbers as `--set` reads them: `1e-3` in a hand-written file is a float, not text.
        return train_config.from_dict(overrides.load_yaml(pathlib.Path(path).read_text()))
    except (yaml.YAMLError, ValueError, TypeError, AttributeError) as error:
        raise RunFolderError(f"cannot read {str(path)!r}: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    """An error's first line; a YAML error's with what it met and where (line, column)."""
    first = (str(error).splitlines() or [type(error).__name__])[0]
    mark = getattr(error, "problem_mark", None)
    if isinstance(error, yaml.MarkedYAMLError) and error.problem and mark is not None:
        context = f"{error.context}: " if error.context else ""
        return f"{context}{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return first


def runs_in(folder: pathlib.Path) -> list[pathlib.Path]:
    """The run folders directly in `folder` (a logdir, a sweep's), in name order."""
    return sorted(path for path in folder.iterdir() if _holds_config(path))


def _holds_config(folder: pathlib.Path) -> bool:
    """Whether `folder` holds a run's config; False where it cannot be looked into."""
    try:
        return (folder / CONFIG).is_file()
    except OSError:  # A folder of another user's, say.
        return False


def write_spec(rundir: str | os.PathLike, spec: env_spec_lib.EnvSpec) -> None:
    """Writes the env's spec as JSON, atomically: what loading a policy needs of the env.

    A spec the folder holds already is not written again: a finished run resumed in a
    read-only folder had nothing else to write.
    """
    _write_once(pathlib.Path(rundir) / SPEC, env_spec_lib.to_data(spec))


def write_spaces(rundir: str | os.PathLike, spaces: dict[str, Any]) -> None:
    """Writes the env's Gymnasium spaces as `envs.space_data` gives them, as `write_spec`."""
    _write_once(pathlib.Path(rundir) / SPACES, spaces)


def read_spaces(rundir: str | os.PathLike) -> dict[str, Any] | None:
    """The spaces' data the run wrote at start; None where it kept none.

    A run keeps none of an env without Gymnasium spaces (a JAX-native env of one's own),
    nor a folder written before runs kept them.
    """
    path = pathlib.Path(rundir) / SPACES
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        raise RunFolderError(f"cannot read {str(path)!r}: {error}") from None


def _write_once(path: pathlib.Path, data: Any) -> None:
    text = json.dumps(data, indent=1) + "\n"
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return
    file_writes.write_atomic(path, text)


def read_spec(rundir: str | os.PathLike) -> env_spec_lib.EnvSpec | None:
    """The env spec the run wrote at start; None for a folder written before runs kept one."""
    path = pathlib.Path(rundir) / SPEC
    try:
        return env_spec_lib.from_data(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, ValueError, TypeError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0]
        raise RunFolderError(f"cannot read {str(path)!r}: {first}") from None

"""A run's metrics written to TensorBoard and a JSON-lines file.

`Writer` appends every `write(step, metrics)` to `logdir/metrics.jsonl` (one JSON object a
line, NaN written as null) and writes the finite scalars to TensorBoard event files in the
same folder. Both are flushed on every write, so a run killed at any moment keeps all it
wrote except possibly a half-written last line, which `read_jsonl` skips and a resumed
`Writer` cuts off before it appends; `sync` puts the rows on disk before a checkpoint.
The terminal's view of a run is `terminal`'s.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import math
import numbers
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from batchrl import tricks
from batchrl.training import file_writes, run_folder

_log = logging.getLogger(__name__)

JSONL_NAME = run_folder.METRICS

# Tells apart the event files of Writers opened on one folder within the same second.
_writer_ids = itertools.count()


class Writer:
    """Writes metrics to TensorBoard event files and `metrics.jsonl` in one folder.

    Opening a folder that already holds a `metrics.jsonl` (a resumed run) appends to it; the
    event files of each `Writer` are new files in the folder, which TensorBoard merges.

    Example:
        with metrics_log.Writer("runs/pendulum") as writer:
            writer.write(env_steps, metrics)
    """

    def __init__(self, logdir: str | os.PathLike, purge_step: int | None = None) -> None:
        """Opens the folder's files.

        `purge_step`: the rows of that step on are dropped, from metrics.jsonl and (by
        TensorBoard) from the earlier event files: a resumed run redoes the phases after
        its checkpoint, and writes their rows again.
        """
        event_file_writer, self._event_pb2, self._summary_pb2 = _import_tensorboardx()
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        jsonl_path = self.logdir / JSONL_NAME
        first = purge_step is None and not jsonl_path.exists()  # The run's own start.
        try:  # A file made read-only, a full disk: one line naming it.
            drop_partial_line(jsonl_path)
            if purge_step is not None:
                drop_rows_from(jsonl_path, purge_step)
            self._jsonl = jsonl_path.open("a", encoding="utf-8")
        except file_writes.WriteError:
            raise
        except OSError as error:
            raise file_writes.write_error(jsonl_path, error) from error
        # EventsWriter writes and flushes synchronously. SummaryWriter hands events to a
        # background thread, so its flush() can return before the last events are on disk.
        # Zero-padded: TensorBoard reads a folder's event files in name order, and writers
        # opened in the same second differ only here ("10" sorted before "9" did).
        suffix = f".{os.getpid()}.{next(_writer_ids):06d}"
        self._events = event_file_writer.EventsWriter(str(self.logdir / "events"), suffix)
        # As tf.summary's purge_step: a session (re)starts there. Also at the run's start:
        # TensorBoard's server takes the first start it reads for the run's, purging nothing.
        if purge_step is not None or first:
            start = self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START)
            step = 0 if purge_step is None else purge_step
            event = self._event_pb2.Event(wall_time=time.time(), step=step, session_log=start)
            self._events.write_event(event)
            self._events.flush()
        self._closed = False

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Appends `{"step": step, **metrics}` to metrics.jsonl, finite scalars to TensorBoard.

        Args:
            step: the x-axis value of this record, usually env steps.
            metrics: flat namespaced metrics, e.g. {"train/return": -512.3}. Non-finite
                values are written as null to the JSON line and left out of TensorBoard.

        Raises:
            ValueError: if the writer is closed or `metrics` has a "step" key.
        """
        if self._closed:
            raise ValueError("write() on a closed Writer")
        if "step" in metrics:
            raise ValueError('metrics must not have a "step" key; it is the record\'s own step')
        record = {"step": int(step)}
        record.update({key: _json_number(value) for key, value in metrics.items()})
        try:  # A full disk: one line naming the file, as the run folder's other writes.
            self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
            self._jsonl.flush()
        except OSError as error:
            raise file_writes.write_error(Path(self._jsonl.name), error) from error
        values = [
            self._summary_pb2.Summary.Value(tag=key, simple_value=value)
            for key, value in record.items()
            if key != "step" and value is not None
        ]
        if values:
            summary = self._summary_pb2.Summary(value=values)
            event = self._event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary)
            try:
                self._events.write_event(event)
                self._events.flush()
            except OSError as error:
                raise file_writes.write_error(
                    self.logdir / "events.out.tfevents.*", error
                ) from error

    def write_text(self, tag: str, markdown: str, step: int = 0) -> None:
        """Writes `markdown` to TensorBoard's Text tab under `tag` (not to metrics.jsonl).

        A run's settings go there at its start, as the table CleanRL users read: runs
        side by side in one TensorBoard differ by more than their folder's name says.
        """
        from tensorboardX.proto import tensor_pb2, tensor_shape_pb2  # Imported by now.

        metadata = self._summary_pb2.SummaryMetadata(
            plugin_data=self._summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        tensor = tensor_pb2.TensorProto(
            dtype="DT_STRING",
            string_val=[markdown.encode()],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]
            ),
        )
        value = self._summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
        summary = self._summary_pb2.Summary(value=[value])
        event = self._event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary)
        try:
            self._events.write_event(event)
            self._events.flush()
        except OSError as error:
            raise file_writes.write_error(self.logdir / "events.out.tfevents.*", error) from error

    def sync(self) -> None:
        """Puts metrics.jsonl's rows on disk (fsync), as a checkpoint after them will be.

        A flush outlives the process, not the machine: after a power cut a checkpoint
        fsynced after unsynced rows would resume past rows that were lost.
        """
        try:
            os.fsync(self._jsonl.fileno())
        except OSError as error:
            raise file_writes.write_error(Path(self._jsonl.name), error) from error

    def close(self) -> None:
        """Closes both files; further closes do nothing."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):  # What a failed write left: it raised already.
                self._jsonl.close()
            with contextlib.suppress(OSError):
                self._events.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Reads a metrics.jsonl file into one dict a line; null values come back as None.

    A last line that does not parse (a run killed mid-write) is skipped with a warning.

    Args:
        path: the file to read.

    Returns:
        The records in file order.

    Raises:
        ValueError: if a line other than the last does not parse.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                _say_truncated(str(path), number)
                break
            raise ValueError(f"{path}: line {number} is not valid JSON: {error}") from error
        _check_record(path, number, record)
        records.append(record)
    return records


@functools.cache
def _say_truncated(path: str, number: int) -> None:
    """Warns of a file's cut last line once a process, however often scripts read the file."""
    _log.warning("%s: skipped a truncated last line %d", path, number)


def _check_record(path: str | os.PathLike, number: int, record: Any) -> None:
    """A ValueError naming a line that is no row: not an object, or a step not a whole number.

    Readers sort and compare rows by step; such a line was a traceback in each of them.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{path}: line {number} is {_kind(record)}, not a row (an object)")
    step = record.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ValueError(f"{path}: line {number} has step {step!r}: a row's step is a whole number")


def _kind(value: Any) -> str:
    """What a JSON value is, in a word or two: "a list", "a number"."""
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _import_tensorboardx() -> tuple[ModuleType, ModuleType, ModuleType]:
    """Imports tensorboardX's event_file_writer, event_pb2 and summary_pb2 without torch.

    Importing any tensorboardX module runs its package __init__, which imports
    tensorboardX.writer, which imports torch where it is installed (the test and bench extras
    install it) only so that SummaryWriter's type hints name torch.Tensor; tensorboardX
    imports torch again, inside its functions, when it is handed a torch tensor. `Writer`
    hands it only protos of Python floats, so torch's import would add 1.5-2.5 s to the
    start-up of every train and sweep process for nothing.

    While tensorboardX is imported, None in sys.modules["torch"] makes `import torch` raise
    ImportError, which tensorboardX takes as torch not installed; the entry is removed right
    after, so a later `import torch` works as usual. Nothing is hidden when torch or
    tensorboardX is already imported, or where the trick is off (`batchrl.tricks`,
    "hidden_torch"). Another thread importing torch during these ~0.4 s
    would get the ImportError; none of batchrl's does. Called when a `Writer` opens, so that
    readers of metrics.jsonl (plots, Progress) import nothing of tensorboardX.
    """
    hide_torch = tricks.on("hidden_torch") and "torch" not in sys.modules
    hide_torch = hide_torch and "tensorboardX" not in sys.modules
    if hide_torch:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        from tensorboardX import event_file_writer
        from tensorboardX.proto import event_pb2, summary_pb2
    finally:
        if hide_torch and sys.modules.get("torch", False) is None:
            del sys.modules["torch"]
    return event_file_writer, event_pb2, summary_pb2


def _json_number(value: float) -> float | int | None:
    """The value as JSON can hold it: None for NaN and infinities, ints kept as ints."""
    number = float(value)
    if not math.isfinite(number):
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return number


def drop_rows_from(path: Path, step: int) -> None:
    """Rewrites `path` (atomically) without its rows of `step` on, where it holds any.

    A run killed after its last checkpoint wrote rows that its resume writes again: the
    file keeps one row a phase, as an uninterrupted run's.
    """
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if _step_of(line) < step]
    if len(kept) < len(lines):
        file_writes.write_atomic(path, "".join(kept))


def _step_of(line: str) -> int:
    """A row's step; -1 for a line of no step (kept as it is, for `read_jsonl` to judge)."""
    try:
        row = json.loads(line)
    except ValueError:
        return -1
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) else -1


def drop_partial_line(path: Path) -> None:
    """Cuts off a last line cut short or that does not parse: appended rows start clean.

    A whole row that lacks only its newline (an editor strips it) gets it, and stays.

    A row appended after it would leave it in the middle of the file, where `read_jsonl`
    refuses it and the next resume, or a plot, stops on it.
    """
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data) and _is_row(data[end:]):  # Whole but for its newline (an editor's).
        with path.open("ab") as file:
            file.write(b"\n")
        return
    what = "a truncated last line"
    if end == len(data):  # Ends with its newline: the last line is one row, or garbage.
        start = data.rfind(b"\n", 0, max(end - 1, 0)) + 1
        if data[start:end].strip() and not _parses(data[start:end]):
            end, what = start, "a last line that does not parse"
    if end < len(data):
        _log.warning("%s: dropped %s, of %d bytes", path, what, len(data) - end)
        with path.open("r+b") as file:
            file.truncate(end)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _is_row(line: bytes) -> bool:
    """Whether `line` is one whole row: a JSON object."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False

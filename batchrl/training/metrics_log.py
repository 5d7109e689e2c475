"""A run's metrics written to TensorBoard and a JSON-lines file, and shown on a terminal.

`Writer` appends every `write(step, metrics)` to `logdir/metrics.jsonl` (one JSON object a
line, NaN written as null) and writes the finite scalars to TensorBoard event files in the
same folder. Both are flushed on every write, so a run killed at any moment keeps all it
wrote except possibly a half-written last line, which `read_jsonl` skips and a resumed
`Writer` cuts off before it appends.

`Progress` redraws one status line (bar, env steps, steps per second, latest returns, ETA),
and on a terminal keeps it moving during a phase; `summary_line` formats one line per
phase for the log.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import numbers
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TextIO

from batchrl import tricks
from batchrl.training import run_folder

_log = logging.getLogger(__name__)

JSONL_NAME = run_folder.METRICS

# Tells apart the event files of Writers opened on one folder within the same second.
_writer_ids = itertools.count()

# (metric key, label, format) in the order `summary_line` shows them.
_SUMMARY_FIELDS = (
    ("train/return", "train return", "{:.1f}"),
    ("eval/return", "eval return", "{:.1f}"),
    ("train/policy_loss", "policy loss", "{:.4g}"),
    ("train/value_loss", "value loss", "{:.4g}"),
    ("train/kl", "kl", "{:.4g}"),
    ("train/penalty", "penalty", "{:.4g}"),
    ("train/entropy", "entropy", "{:.4g}"),
    ("perf/env_steps_per_sec", "steps/s", "{:,.0f}"),
)


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

        `purge_step`: TensorBoard drops the earlier files' events from that step on (a
        resumed run redoes the phases after its checkpoint).
        """
        event_file_writer, self._event_pb2, self._summary_pb2 = _import_tensorboardx()
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        jsonl_path = self.logdir / JSONL_NAME
        _drop_partial_line(jsonl_path)
        self._jsonl = jsonl_path.open("a", encoding="utf-8")
        # EventsWriter writes and flushes synchronously. SummaryWriter hands events to a
        # background thread, so its flush() can return before the last events are on disk.
        # Zero-padded: TensorBoard reads a folder's event files in name order, and writers
        # opened in the same second differ only here ("10" sorted before "9" did).
        suffix = f".{os.getpid()}.{next(_writer_ids):06d}"
        self._events = event_file_writer.EventsWriter(str(self.logdir / "events"), suffix)
        if purge_step is not None:  # As tf.summary's purge_step: a session (re)starts there.
            start = self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START)
            event = self._event_pb2.Event(wall_time=time.time(), step=purge_step, session_log=start)
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
        self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
        self._jsonl.flush()
        values = [
            self._summary_pb2.Summary.Value(tag=key, simple_value=value)
            for key, value in record.items()
            if key != "step" and value is not None
        ]
        if values:
            summary = self._summary_pb2.Summary(value=values)
            event = self._event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary)
            self._events.write_event(event)
            self._events.flush()

    def close(self) -> None:
        """Closes both files; further closes do nothing."""
        if not self._closed:
            self._closed = True
            self._jsonl.close()
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
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                _log.warning("%s: skipped a truncated last line %d", path, number)
                break
            raise ValueError(f"{path}: line {number} is not valid JSON: {error}") from error
    return records


class Progress:
    """A one-line progress display: bar, env steps, steps per second, latest returns and ETA.

    On a terminal the line is redrawn in place with carriage returns, and `ticking()`
    redraws it every second between updates; on any other stream (a log file, a pipe)
    each `update` prints a line of its own, so call it once a phase.
    """

    def __init__(
        self,
        total_steps: int,
        initial_steps: int = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Starts the clock.

        Args:
            total_steps: env steps of the whole run.
            initial_steps: env steps already done (a resumed run); the speed counts only
                the steps done after them.
            stream: where to write; sys.stderr when None.
            clock: seconds from an arbitrary start; tests pass a fake one.
        """
        self.total_steps = total_steps
        self.initial_steps = initial_steps
        self._stream = sys.stderr if stream is None else stream
        self._clock = clock
        self._start = clock()
        self._tty = _is_tty(self._stream)
        self._returns: dict[str, float] = {}  # Latest finite train/eval return.
        self._line = ""  # The line drawn on the terminal, "" when none is open.
        self._steps, self._at, self._phase = initial_steps, self._start, 0  # Last update.
        self._updated = False
        self._lock = threading.Lock()

    def update(self, env_steps: int, metrics: Mapping[str, float]) -> None:
        """Redraws the line for `env_steps` done; returns absent or NaN keep their last value.

        Args:
            env_steps: env steps done so far in the run, counting `initial_steps`.
            metrics: the latest metrics; "train/return" and "eval/return" are shown.
        """
        with self._lock:
            for key in ("train/return", "eval/return"):
                if key in metrics and math.isfinite(metrics[key]):
                    self._returns[key] = float(metrics[key])
            self._phase = max(env_steps - self._steps, 0)
            self._steps, self._at, self._updated = env_steps, self._clock(), True
            self._draw(self._format(env_steps))

    def tick(self) -> None:
        """Redraws the terminal line with the steps estimated from the speed so far.

        The estimate stops at the end of the phase under way (taken to be as long as the
        last one); the next `update` shows the counted steps again. Off a terminal, or
        before the first update, it draws nothing.
        """
        with self._lock:
            if not self._tty or not self._updated:
                return
            now = self._clock()
            elapsed = self._at - self._start
            rate = (self._steps - self.initial_steps) / elapsed if elapsed > 0 else 0.0
            estimate = self._steps + min(round(rate * (now - self._at)), self._phase)
            self._draw(self._format(estimate))

    @contextlib.contextmanager
    def ticking(self, interval: float = 1.0):
        """Calls `tick` every `interval` seconds on a daemon thread while the block runs."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                self.tick()

        thread = threading.Thread(target=loop, name="progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    def print(self, text: str, stream: TextIO | None = None) -> None:
        """Ends the line drawn, prints `text` on a line of its own (stdout by default)."""
        with self._lock:
            self._end_line()
            print(text, file=sys.stdout if stream is None else stream, flush=True)

    def close(self) -> None:
        """Ends the line drawn on a terminal, so what follows starts on a line of its own."""
        with self._lock:
            self._end_line()

    def _draw(self, line: str) -> None:
        if not self._tty:
            self._stream.write(line + "\n")
        else:
            line = _fit(line.split("  "), max(_columns(self._stream) - 1, 1))
            self._stream.write("\r" + line.ljust(len(self._line)))
            self._line = line
        self._stream.flush()

    def _end_line(self) -> None:
        if self._tty and self._line:
            self._stream.write("\n")
            self._stream.flush()
        self._line = ""

    def _format(self, env_steps: int) -> str:
        fraction = min(max(env_steps / self.total_steps, 0.0), 1.0) if self.total_steps else 1.0
        filled = round(20 * fraction)
        elapsed = self._clock() - self._start
        done = env_steps - self.initial_steps
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        parts = [
            f"[{'#' * filled}{'-' * (20 - filled)}]",
            f"{fraction:.0%}",
            f"{env_steps:,}/{self.total_steps:,} steps",
            f"{rate:,.0f} steps/s" if rate else "? steps/s",
        ]
        for key, label in (("train/return", "train return"), ("eval/return", "eval return")):
            if key in self._returns:
                parts.append(f"{label} {self._returns[key]:.1f}")
        remaining = max(self.total_steps - env_steps, 0)
        parts.append(f"ETA {_duration(remaining / rate)}" if rate else "ETA ?")
        return "  ".join(parts)


def _fit(parts: list[str], width: int) -> str:
    """The fields of a progress line within `width` columns: whole fields dropped, not cut.

    The bar's hashes go first (its percentage stays), then the step count, the speed and
    the train return; only a terminal narrower than what is left cuts characters.
    """
    order = (lambda p: p.startswith("["), lambda p: p.endswith(" steps"))
    order += (lambda p: p.endswith(" steps/s"), lambda p: p.startswith("train return"))
    for droppable in order:
        if len("  ".join(parts)) <= width:
            break
        parts = [part for part in parts if not droppable(part)]
    return "  ".join(parts)[:width]


def summary_line(phase: int, env_steps: int, metrics: Mapping[str, float]) -> str:
    """One log line for a finished phase, showing the metrics it has among the usual ones.

    Example:
        "phase 3  env steps 120,000  train return -512.3  eval return -230.1  policy loss
        -0.01234  kl 0.008  steps/s 41,200"

    Args:
        phase: the phase number.
        env_steps: env steps done by the end of the phase.
        metrics: the phase's metrics; keys not present are left out, NaN shows as "nan".

    Returns:
        The line, without a newline.
    """
    parts = [f"phase {phase}", f"env steps {env_steps:,}"]
    for key, label, number_format in _SUMMARY_FIELDS:
        if key in metrics:
            parts.append(f"{label} {number_format.format(float(metrics[key]))}")
    return "  ".join(parts)


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


def _drop_partial_line(path: Path) -> None:
    """Cuts off a last line left without its newline, so that appended lines start clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        _log.warning("%s: dropped a truncated last line of %d bytes", path, len(data) - end)
        with path.open("r+b") as file:
            file.truncate(end)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` draws on; COLUMNS, where set, as shutil reads it.

    Not shutil.get_terminal_size's own: it measures stdout, which `train ... | tee log`
    makes a pipe, and then says 80 columns however wide stderr's terminal is.
    """
    if "COLUMNS" not in os.environ:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            return os.get_terminal_size(stream.fileno()).columns
    return shutil.get_terminal_size().columns


def _duration(seconds: float) -> str:
    """Formats seconds as h:mm:ss."""
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"

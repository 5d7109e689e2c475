"""A run's progress on a terminal: one status line redrawn in place, and a line a phase.

`Progress` redraws one status line (bar, env steps, steps per second, latest returns, ETA),
and on a terminal keeps it moving during a phase; `summary_line` formats one line per
phase for the log.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TextIO


def say(text: str, stream: TextIO | None = None) -> None:
    """Writes `text` and flushes it to `stream` (stdout); one whose reader is gone goes quiet.

    A run outlives its output: `| tee` quits at the Ctrl-C the run stops on (EPIPE), and
    an ssh connection that drops closes the terminal under a `disown`ed run (EIO). The
    write failed and the run died at its phase's end, its interrupt's checkpoint unsaved.
    Such a stream writes to /dev/null from then on, Python's own flush at exit included.
    """
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(text)
        stream.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())  # A stream without a file (a notebook's) keeps its.
            os.close(null)
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def return_text(value: float) -> str:
    """A return as the terminal shows it: one decimal, three digits where it is below 10.

    One decimal shows MiniGrid's and FrozenLake's returns, all in [0, 1], as 0.0 or 0.1.
    """
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:#.3g}"


def counted(number: int, noun: str) -> str:
    """`number` and `noun`, plural unless one: "1 seed", "3 seeds"."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def rounded_budget(asked: int, phases: int, phase_steps: int) -> str:
    """Where `asked` env steps round up to whole phases, a clause of the first line saying so.

    Said where it adds more than 1 % (`steps=6000` on 16 envs trains 6,400); `pendulum`'s
    1M steps in phases of 6,000 (1,002,000) pass unsaid.
    """
    trained = phases * phase_steps
    if trained - asked <= asked // 100:
        return ""
    whole = counted(phases, "whole phase")
    return f"; steps={asked:,} rounded up to {whole} of {phase_steps:,}: {trained:,} env steps"


# (metric key, label, format) in the order `summary_line` shows them.
_SUMMARY_FIELDS = (
    ("train/return", "train return", return_text),
    ("eval/return", "eval return", return_text),
    ("train/policy_loss", "policy loss", "{:.4g}".format),
    ("train/value_loss", "value loss", "{:.4g}".format),
    ("train/kl", "kl", "{:.4g}".format),
    ("train/penalty", "penalty", "{:.4g}".format),
    ("train/entropy", "entropy", "{:.4g}".format),
    ("perf/env_steps_per_sec", "steps/s", "{:,.0f}".format),
)


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
        seeds: int = 1,
    ) -> None:
        """Starts the clock.

        Args:
            total_steps: env steps of the whole run.
            initial_steps: env steps already done (a resumed run); the speed counts only
                the steps done after them.
            stream: where to write; sys.stderr when None.
            clock: seconds from an arbitrary start; tests pass a fake one.
            seeds: runs trained together, whose steps the counts add up ("of 2 seeds").
        """
        self.total_steps = total_steps
        self.initial_steps = initial_steps
        self._of = f" of {seeds} seeds" if seeds > 1 else ""
        self._stream = sys.stderr if stream is None else stream
        self._clock = clock
        self._start = clock()
        self._tty = _is_tty(self._stream)
        self._returns: dict[str, float] = {}  # Latest finite train/eval return.
        self._line = ""  # The line drawn on the terminal, "" when none is open.
        self._steps, self._at, self._phase = initial_steps, self._start, 0  # Last update.
        self._first: tuple[int, float] | None = None  # Steps and time the speed counts from.
        self._evaluated = False  # Whether an update came after an evaluation.
        self._held: float | None = None  # The speed before `_first` moved past an eval.
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
            if self._first is None:
                self._first = env_steps, self._at
            self._draw(self._format(env_steps))
            if metrics.get("perf/eval_seconds", 0.0) > 0.0 and not self._evaluated:
                self._held = self._rate(env_steps, self._at)  # Till the next update.
                self._first, self._evaluated = (env_steps, self._at), True  # Past its compile.

    def tick(self) -> None:
        """Redraws the terminal line with the steps estimated from the speed so far.

        The estimate stops at the end of the phase under way (taken to be as long as the
        last one, and not past the run's steps); the next `update` shows the counted steps
        again. Off a terminal, before the first update, or after the last, it draws nothing.
        """
        with self._lock:
            # After the last phase, while its checkpoint is written, its line stands last.
            if not self._tty or not self._updated or self._steps >= self.total_steps:
                return
            now = self._clock()
            rate = self._rate(self._steps, self._at) or 0.0
            left = min(self._phase, self.total_steps - self._steps)
            estimate = self._steps + min(round(rate * (now - self._at)), left)
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
            say(text + "\n", stream)

    def close(self) -> None:
        """Ends the line drawn on a terminal, so what follows starts on a line of its own."""
        with self._lock:
            self._end_line()

    def _draw(self, line: str) -> None:
        if not self._tty:
            say(line + "\n", self._stream)
        else:
            line = _fit(line.split("  "), max(_columns(self._stream) - 1, 1))
            say("\r" + line.ljust(len(self._line)), self._stream)
            self._line = line

    def _end_line(self) -> None:
        if self._tty and self._line:
            say("\n", self._stream)
        self._line = ""

    def _format(self, env_steps: int) -> str:
        fraction = min(max(env_steps / self.total_steps, 0.0), 1.0) if self.total_steps else 1.0
        filled = round(20 * fraction)
        rate = self._rate(env_steps, self._clock())
        parts = [
            f"[{'#' * filled}{'-' * (20 - filled)}]",
            f"{fraction:.0%}",
            f"{env_steps:,}/{self.total_steps:,} steps{self._of}",
            f"{rate:,.0f} steps/s" if rate else "? steps/s",
        ]
        for key, label in (("train/return", "train return"), ("eval/return", "eval return")):
            if key in self._returns:
                parts.append(f"{label} {return_text(self._returns[key])}")
        remaining = max(self.total_steps - env_steps, 0)
        parts.append(f"ETA {_duration(remaining / rate)}" if rate else "ETA ?")
        return "  ".join(parts)

    def _rate(self, env_steps: int, now: float) -> float | None:
        """Env steps a second since the first update, once one came; else since the start.

        The first phase holds the compile (17 s of a 24k-step run's 25): counted in, the
        speed read 318 steps/s where the phases after ran at 6,000 to 8,000, and the ETA
        stayed twice too long through a 1M-step run. So does the first evaluation, which
        compiles its own program (with `eval_every=2`: 1,294 steps/s against 5,848): the
        speed counts from the update after it.
        """
        steps, since = (self.initial_steps, self._start) if self._first is None else self._first
        if env_steps <= steps:
            if self._held is not None:
                return self._held
            steps, since = self.initial_steps, self._start
        done, elapsed = env_steps - steps, now - since
        return done / elapsed if elapsed > 0 and done > 0 else None


def _fit(parts: list[str], width: int) -> str:
    """The fields of a progress line within `width` columns: whole fields dropped, not cut.

    The bar's hashes go first (its percentage stays), then the step count, the speed and
    the train return; only a terminal narrower than what is left cuts characters.
    """
    order = (lambda p: p.startswith("["), lambda p: p.endswith((" steps", " seeds")))
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
        metrics: the phase's metrics; keys not present are left out, and so is a NaN
            return (no episode ended in the phase: the progress line leaves it out too;
            "nan" read as a diverged run), while a NaN loss shows as "nan".

    Returns:
        The line, without a newline.
    """
    parts = [f"phase {phase}", f"env steps {env_steps:,}"]
    for key, label, number_format in _SUMMARY_FIELDS:
        if key not in metrics:
            continue
        value = float(metrics[key])
        if number_format is return_text and math.isnan(value):
            continue  # No episode ended in the phase.
        parts.append(f"{label} {number_format(value)}")
    return "  ".join(parts)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` draws on; COLUMNS, where set, as shutil reads it.

    Not shutil.get_terminal_size's own: it measures stdout, which `train ... | tee log`
    makes a pipe, and then says 80 columns however wide stderr's terminal is. A terminal
    that says 0 columns (some containers' exec sessions) gets shutil's, 80 where it knows
    no other.
    """
    if "COLUMNS" not in os.environ:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            columns = os.get_terminal_size(stream.fileno()).columns
            if columns > 0:
                return columns
    return shutil.get_terminal_size().columns


def _duration(seconds: float) -> str:
    """Formats seconds as h:mm:ss."""
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


@contextlib.contextmanager
def said_once(name: str = "batchrl") -> Iterator[None]:
    """Drops a log record of logger `name` or below whose message was said already inside.

    The seeds of a together-run each start or resume a run of one config: its warnings (an
    env's own step limit, say) were said once a seed.
    """
    said: set[str] = set()

    def first(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        new = message not in said
        said.add(message)
        return new

    loggers = [logging.getLogger(name)]
    loggers += [
        logger
        for key, logger in logging.Logger.manager.loggerDict.items()
        if key.startswith(f"{name}.") and isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        logger.addFilter(first)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(first)


def phases_said(total: int) -> str:
    """What a finished run trained, as its resume says it: "all its 5 phases", "its 1 phase"."""
    return f"all its {total} phases" if total > 1 else "its 1 phase"

"""Tests for logging: JSONL and event files, truncated lines, Progress and summary lines."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
from tensorboard.backend.event_processing import event_accumulator

from batchrl.training import metrics_log


def read_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """(step, value) pairs of each scalar tag, as TensorBoard reads them from `logdir`."""
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_jsonl_lines_written_and_read_back_with_nan_as_null(tmp_path):
    with metrics_log.Writer(tmp_path) as writer:
        writer.write(0, {"train/return": -512.25, "eval/return": math.nan, "perf/env_steps": 0})
        writer.write(100, {"train/return": -300.5, "eval/return": -230.0, "perf/env_steps": 100})

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {
        "step": 0,
        "train/return": -512.25,
        "eval/return": None,
        "perf/env_steps": 0,
    }
    assert '"eval/return": null' in lines[0]
    assert metrics_log.read_jsonl(tmp_path / "metrics.jsonl") == [
        {"step": 0, "train/return": -512.25, "eval/return": None, "perf/env_steps": 0},
        {"step": 100, "train/return": -300.5, "eval/return": -230.0, "perf/env_steps": 100},
    ]


def test_event_files_hold_the_finite_scalars_before_close(tmp_path):
    writer = metrics_log.Writer(tmp_path)
    writer.write(10, {"train/kl": 0.5, "train/policy_loss": -0.25, "eval/return": math.nan})
    writer.write(20, {"train/kl": 0.125, "eval/return": math.inf})
    # Flushed on write: readable while the writer is still open.
    assert read_scalars(tmp_path) == {
        "train/kl": [(10, 0.5), (20, 0.125)],
        "train/policy_loss": [(10, -0.25)],
    }
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(30, {"train/kl": 1.0})


def test_killed_run_keeps_what_it_wrote(tmp_path):
    script = textwrap.dedent(f"""
        import os
        from batchrl.training import metrics_log
        writer = metrics_log.Writer({str(tmp_path)!r})
        for step in range(3):
            writer.write(step, {{"train/return": float(step)}})
        os._exit(9)  # No cleanup, as when the process is killed.
    """)
    result = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert result.returncode == 9, result.stderr.decode()
    expected = [{"step": step, "train/return": float(step)} for step in range(3)]
    assert metrics_log.read_jsonl(tmp_path / "metrics.jsonl") == expected
    assert read_scalars(tmp_path) == {"train/return": [(0, 0.0), (1, 1.0), (2, 2.0)]}


def test_writing_metrics_leaves_torch_unimported(tmp_path):
    # tensorboardX imports torch where it is installed, 1.5-2.5 s of every train process's
    # start-up; the Writer keeps it out, and leaves `import torch` working for later.
    script = textwrap.dedent(f"""
        import importlib.util, sys
        from batchrl.training import metrics_log
        assert importlib.util.find_spec("torch"), "the test extra installs torch"
        with metrics_log.Writer({str(tmp_path)!r}) as writer:
            writer.write(5, {{"train/return": 1.5}})
        print(sorted(name for name in sys.modules if name.split(".")[0] == "torch"))
    """)
    result = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"
    assert read_scalars(tmp_path) == {"train/return": [(5, 1.5)]}


def test_read_jsonl_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 0, "train/return": 1.0}\n{"step": 1, "train/return": 2.0}\n{"step": 2, "tr'
    )
    assert metrics_log.read_jsonl(path) == [
        {"step": 0, "train/return": 1.0},
        {"step": 1, "train/return": 2.0},
    ]


def test_read_jsonl_rejects_a_bad_line_before_the_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, \n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2"):
        metrics_log.read_jsonl(path)


def test_resumed_writer_appends_after_cutting_a_truncated_line(tmp_path):
    with metrics_log.Writer(tmp_path) as writer:
        writer.write(0, {"train/return": 1.0})
    with (tmp_path / "metrics.jsonl").open("a") as file:
        file.write('{"step": 1, "train/ret')  # Killed mid-write.
    with metrics_log.Writer(tmp_path) as writer:
        writer.write(1, {"train/return": 2.0})

    assert metrics_log.read_jsonl(tmp_path / "metrics.jsonl") == [
        {"step": 0, "train/return": 1.0},
        {"step": 1, "train/return": 2.0},
    ]
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert read_scalars(tmp_path) == {"train/return": [(0, 1.0), (1, 2.0)]}


def test_write_rejects_a_step_metric(tmp_path):
    with metrics_log.Writer(tmp_path) as writer, pytest.raises(ValueError, match="step"):
        writer.write(0, {"step": 1.0})


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_prints_plain_lines_on_a_stream_that_is_not_a_tty():
    stream, clock = io.StringIO(), FakeClock()
    progress = metrics_log.Progress(1_000_000, stream=stream, clock=clock)
    clock.now += 10.0
    progress.update(250_000, {"train/return": -512.34, "eval/return": math.nan})
    clock.now += 10.0
    progress.update(500_000, {"eval/return": -230.06})
    progress.close()

    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 3
    assert "\r" not in stream.getvalue()
    first, second = lines[:2]
    assert "250,000/1,000,000 steps" in first
    assert "25,000 steps/s" in first
    assert "train return -512.3" in first
    assert "eval return" not in first
    assert "ETA 0:00:30" in first
    assert "[#####---------------]" in first
    assert "500,000/1,000,000 steps" in second
    assert "train return -512.3" in second  # The latest, kept while no episode finishes.
    assert "eval return -230.1" in second
    assert "ETA 0:00:20" in second


def test_progress_speed_counts_only_steps_after_initial_steps():
    stream, clock = io.StringIO(), FakeClock()
    progress = metrics_log.Progress(1_000, initial_steps=600, stream=stream, clock=clock)
    progress.update(600, {})
    assert "? steps/s" in stream.getvalue() and "ETA ?" in stream.getvalue()
    clock.now += 2.0
    progress.update(800, {})
    assert "100 steps/s" in stream.getvalue().splitlines()[-1]
    assert "ETA 0:00:02" in stream.getvalue().splitlines()[-1]


class TtyStream(io.StringIO):
    def isatty(self):
        return True


def test_progress_redraws_one_line_on_a_tty():
    stream, clock = TtyStream(), FakeClock()
    progress = metrics_log.Progress(100, stream=stream, clock=clock)
    clock.now += 1.0
    progress.update(50, {"train/return": 1.0})
    progress.update(100, {})
    progress.close()
    progress.close()

    output = stream.getvalue()
    assert output.count("\r") == 2
    assert output.count("\n") == 1 and output.endswith("\n")
    assert "100/100 steps" in output.split("\r")[-1]


@pytest.mark.parametrize(
    ("columns", "shown"),
    [
        (200, "[######--------------]  30%  300,000/1,000,000 steps  5,000 steps/s  train return"),
        (80, "30%  5,000 steps/s  train return 227.5  eval return 500.0  ETA 0:02:20"),
        (60, "30%  train return 227.5  eval return 500.0  ETA 0:02:20"),
        (45, "30%  eval return 500.0  ETA 0:02:20"),
    ],
)
def test_a_narrow_terminal_drops_whole_fields_and_keeps_the_returns(monkeypatch, columns, shown):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: os.terminal_size((columns, 24)))
    stream, clock = TtyStream(), FakeClock()
    progress = metrics_log.Progress(1_000_000, stream=stream, clock=clock)
    clock.now += 60.0
    progress.update(300_000, {"train/return": 227.5, "eval/return": 500.0})
    line = stream.getvalue().split("\r")[-1].rstrip()
    assert line.startswith(shown) and len(line) < columns
    assert line.endswith("ETA 0:02:20")


def test_summary_line_shows_the_usual_metrics_present():
    metrics = {
        "train/return": -512.34,
        "eval/return": -230.06,
        "train/policy_loss": -0.01234,
        "train/kl": 0.008,
        "train/grad_norm": 3.0,
        "perf/env_steps_per_sec": 41_234.4,
    }
    line = metrics_log.summary_line(3, 120_000, metrics)
    assert line == (
        "phase 3  env steps 120,000  train return -512.3  eval return -230.1  "
        "policy loss -0.01234  kl 0.008  steps/s 41,234"
    )
    assert "train return nan" in metrics_log.summary_line(1, 0, {"train/return": math.nan})


def test_progress_moves_during_a_phase_at_the_speed_so_far_up_to_the_phase_end(capsys):
    stream, clock = TtyStream(), FakeClock()
    progress = metrics_log.Progress(1_000, stream=stream, clock=clock)
    progress.tick()
    assert stream.getvalue() == ""  # Nothing to estimate from before the first phase.
    clock.now += 10.0
    progress.update(100, {})  # 10 steps/s; phases of 100 steps.
    progress.print("phase 1")
    clock.now += 5.0
    progress.tick()
    assert "150/1,000 steps" in stream.getvalue().split("\r")[-1]
    clock.now += 60.0
    progress.tick()
    assert "200/1,000 steps" in stream.getvalue().split("\r")[-1]  # Not past the phase.
    progress.update(200, {})
    progress.close()
    first, second, last = stream.getvalue().split("\n")  # The printed line ended the first.
    assert "100/1,000 steps" in first and second.count("\r") == 3 and last == ""
    assert capsys.readouterr().out == "phase 1\n"


def test_the_line_fits_the_terminal_it_is_drawn_on_when_stdout_is_piped():
    """`train ... | tee log`: stdout is a pipe, the line goes to stderr's terminal."""
    import fcntl
    import pty
    import struct
    import termios

    terminals = {}
    for columns in (200, 50):
        main, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        terminals[columns] = main, terminal
    script = textwrap.dedent(
        f"""
        import os
        from batchrl.training import metrics_log
        for fd in {[terminal for _, terminal in terminals.values()]}:
            stream = os.fdopen(fd, "w")
            clock = iter([0.0, 60.0, 60.0]).__next__
            progress = metrics_log.Progress(1_000_000, stream=stream, clock=clock)
            progress.update(300_000, {{"train/return": 227.5, "eval/return": 500.0}})
            progress.close()
        """
    )
    environ = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    fds = [terminal for _, terminal in terminals.values()]
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, pass_fds=fds, env=environ
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    lines = {}
    for columns, (main, terminal) in terminals.items():
        os.close(terminal)
        lines[columns] = os.read(main, 4096).decode().strip("\r\n")
        os.close(main)
    assert lines[200] == (
        "[######--------------]  30%  300,000/1,000,000 steps  5,000 steps/s  "
        "train return 227.5  eval return 500.0  ETA 0:02:20"
    )
    assert lines[50] == "30%  eval return 500.0  ETA 0:02:20"  # Within 50, not wrapped.


def _drawn_in_three_ticks(stream) -> str:
    """What a Progress drew on `stream` while its ticking thread ticked 3 times."""
    progress = metrics_log.Progress(1_000, stream=stream)
    progress.update(10, {})
    ticks, tick = threading.Semaphore(0), progress.tick
    progress.tick = lambda: (tick(), ticks.release())
    with progress.ticking(interval=0.01):
        for _ in range(3):
            ticks.acquire()
    progress.close()
    return stream.getvalue()


def test_progress_ticks_only_on_a_terminal(capsys):
    assert _drawn_in_three_ticks(TtyStream()).count("\r") >= 3
    assert "\r" not in _drawn_in_three_ticks(io.StringIO())
    assert "\r" not in capsys.readouterr().err


def test_a_resumed_writers_purge_step_drops_the_earlier_events_it_redoes(tmp_path):
    with metrics_log.Writer(tmp_path) as writer:  # Killed after step 3, checkpointed at 1.
        for step in (1, 2, 3):
            writer.write(step, {"train/return": float(step)})
    with metrics_log.Writer(tmp_path, purge_step=2) as writer:
        for step in (2, 3, 4):
            writer.write(step, {"train/return": 10.0 * step})
    assert read_scalars(tmp_path) == {"train/return": [(1, 1.0), (2, 20.0), (3, 30.0), (4, 40.0)]}


def test_event_files_of_writers_opened_in_one_second_read_in_the_order_they_were_written(
    tmp_path,
):
    for step in range(12):  # Writer ids pass from one digit to two.
        with metrics_log.Writer(tmp_path) as writer:
            writer.write(step, {"train/return": float(step)})
    assert read_scalars(tmp_path) == {"train/return": [(s, float(s)) for s in range(12)]}

"""The progress line on a terminal and in a log, and the line a phase."""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

from batchrl.training import terminal


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_prints_plain_lines_on_a_stream_that_is_not_a_tty():
    stream, clock = io.StringIO(), FakeClock()
    progress = terminal.Progress(1_000_000, stream=stream, clock=clock)
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


def test_the_speed_and_eta_leave_out_the_first_phase_and_its_compile_once_past_it():
    # From the start, the compile in the first phase read 318 steps/s where the phases
    # after ran at 6,000-8,000, and the ETA stayed twice too long through a 1M-step run.
    stream, clock = io.StringIO(), FakeClock()
    progress = terminal.Progress(100_000, stream=stream, clock=clock)
    clock.now += 17.0  # The first phase: its compile, then a second of stepping.
    progress.update(10_000, {})
    clock.now += 1.0
    progress.update(20_000, {})
    first, second = stream.getvalue().splitlines()
    assert "588 steps/s" in first  # No phase but the first to go by yet.
    assert "10,000 steps/s" in second and "ETA 0:00:08" in second


def test_the_speed_leaves_out_the_first_evaluations_compile_too():
    # With eval_every=2 the first evaluation compiles its program in the second phase: the
    # line read 1,294 steps/s where the phases ran at 5,848 and 8,786.
    stream, clock = io.StringIO(), FakeClock()
    progress = terminal.Progress(100_000, stream=stream, clock=clock)
    for seconds, evaluated in ((17.0, 0.0), (1.0, 0.0), (12.0, 11.0), (1.0, 0.0)):
        clock.now += seconds
        progress.update(
            10_000 * (len(stream.getvalue().splitlines()) + 1), {"perf/eval_seconds": evaluated}
        )
    *_, before, after = stream.getvalue().splitlines()
    assert "1,538 steps/s" in before  # 20k steps in 13 s, from the first update on.
    assert "10,000 steps/s" in after and "ETA 0:00:06" in after


def test_progress_speed_counts_only_steps_after_initial_steps():
    stream, clock = io.StringIO(), FakeClock()
    progress = terminal.Progress(1_000, initial_steps=600, stream=stream, clock=clock)
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
    progress = terminal.Progress(100, stream=stream, clock=clock)
    clock.now += 1.0
    progress.update(50, {"train/return": 1.0})
    progress.update(100, {})
    progress.close()
    progress.close()

    output = stream.getvalue()
    assert output.count("\r") == 2
    assert output.count("\n") == 1 and output.endswith("\n")
    assert "100/100 steps" in output.split("\r")[-1]


def test_no_tick_after_the_last_phase_nor_an_estimate_past_the_runs_steps(monkeypatch):
    # While the last checkpoint was written, a tick drew "65,400/60,000 steps" under the
    # last phase's line, and the shell's prompt came after it on that line.
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: os.terminal_size((200, 24)))
    stream, clock = TtyStream(), FakeClock()
    progress = terminal.Progress(60_000, stream=stream, clock=clock)
    for steps in range(6_000, 54_001, 6_000):
        clock.now += 1.0
        progress.update(steps, {})
    clock.now += 5.0  # Past the last phase's length: the estimate stops at the run's steps.
    progress.tick()
    assert "60,000/60,000 steps" in stream.getvalue().split("\r")[-1]
    progress.update(60_000, {})
    progress.print("phase 10")
    drawn = stream.getvalue()
    clock.now += 0.9
    progress.tick()
    assert stream.getvalue() == drawn


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
    progress = terminal.Progress(1_000_000, stream=stream, clock=clock)
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
    line = terminal.summary_line(3, 120_000, metrics)
    assert line == (
        "phase 3  env steps 120,000  train return -512.3  eval return -230.1  "
        "policy loss -0.01234  kl 0.008  steps/s 41,234"
    )
    # No episode ended in the phase: left out, as the progress line leaves it; a NaN loss shows.
    ended_none = {"train/return": math.nan, "train/policy_loss": math.nan}
    assert terminal.summary_line(1, 0, ended_none) == "phase 1  env steps 0  policy loss nan"


def test_returns_below_ten_keep_three_digits_where_one_decimal_hides_them():
    # MiniGrid's returns lie in [0, 1]: 1 - 0.9 * 196 / 250 for a door opened at step 196.
    returns = {"train/return": 0.2944, "eval/return": 0.0}
    line = terminal.summary_line(1, 256, returns)
    assert "train return 0.294  eval return 0.00" in line
    stream = io.StringIO()
    progress = terminal.Progress(1000, stream=stream)
    progress.update(256, returns)
    assert "train return 0.294  eval return 0.00" in stream.getvalue()


def test_progress_moves_during_a_phase_at_the_speed_so_far_up_to_the_phase_end(capsys):
    stream, clock = TtyStream(), FakeClock()
    progress = terminal.Progress(1_000, stream=stream, clock=clock)
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
    for columns in (200, 50, 0):  # 0: a terminal that knows no width, drawn on as 80.
        main, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        terminals[columns] = main, terminal
    script = textwrap.dedent(
        f"""
        import os
        from batchrl.training import terminal
        for fd in {[terminal for _, terminal in terminals.values()]}:
            stream = os.fdopen(fd, "w")
            clock = iter([0.0, 60.0, 60.0]).__next__
            progress = terminal.Progress(1_000_000, stream=stream, clock=clock)
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
    assert lines[0] == "30%  5,000 steps/s  train return 227.5  eval return 500.0  ETA 0:02:20"


def _drawn_in_three_ticks(stream) -> str:
    """What a Progress drew on `stream` while its ticking thread ticked 3 times."""
    progress = terminal.Progress(1_000, stream=stream)
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


def test_a_count_of_one_reads_singular():
    assert terminal.counted(1, "seed") == "1 seed"
    assert terminal.counted(0, "seed") == "0 seeds"
    assert terminal.counted(3, "seed") == "3 seeds"


def test_a_stream_whose_reader_went_away_goes_quiet_and_the_writer_goes_on():
    # A pipe whose reader closed (`| tee` quit), as a terminal an ssh drop closed (EIO).
    read, write = os.pipe()
    os.close(read)
    with open(write, "w") as stream:
        with pytest.raises(BrokenPipeError):  # What a plain print met.
            stream.write("lost\n")
            stream.flush()
        terminal.say("lost again\n", stream)  # Now /dev/null behind the same file.
        terminal.say("and on\n", stream)
        progress = terminal.Progress(total_steps=10, stream=stream)
        progress.update(5, {})
        progress.print("a phase's line", stream)
        assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))

"""Tests for logging: JSONL and event files, truncated lines, TensorBoard purges."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import textwrap

import pytest
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util

from batchrl.training import file_writes, metrics_log


def read_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """(step, value) pairs of each scalar tag, as TensorBoard reads them from `logdir`."""
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def served_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """(step, value) pairs of each scalar tag, as TensorBoard's server reads them in Python.

    Its loader with `--load_fast=false`, and where its Rust data server is missing.
    """
    accumulator = plugin_event_accumulator.EventAccumulator(
        str(logdir), size_guidance={"tensors": 0}
    )
    accumulator.Reload()
    return {
        tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in events]
        for tag in accumulator.Tags()["tensors"]
        if (events := accumulator.Tensors(tag)) and tag != "config/text_summary"
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


def test_a_row_the_disk_cannot_take_is_one_line_naming_the_file(tmp_path):
    writer = metrics_log.Writer(tmp_path)
    writer._jsonl.close()
    writer._jsonl = open("/dev/full", "w")  # noqa: SIM115  Writes: ENOSPC.
    with pytest.raises(file_writes.WriteError, match=r"^cannot write '/dev/full': No space left"):
        writer.write(10, {"train/kl": 0.5})
    writer.close()  # What the failed write left is not raised again.


def test_a_metrics_file_it_cannot_open_is_one_line_naming_it(tmp_path):
    # A resume's metrics.jsonl made read-only (chattr +i), say: a traceback from open().
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(file_writes.WriteError) as refused:
        metrics_log.Writer(tmp_path, purge_step=10)
    assert str(refused.value) == (
        f"cannot write '{tmp_path / 'metrics.jsonl'}': Is a directory; a folder stands at its path"
    )


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


def test_read_jsonl_skips_a_truncated_last_line(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 0, "train/return": 1.0}\n{"step": 1, "train/return": 2.0}\n{"step": 2, "tr'
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # As `table` reads a run's metrics several times, warned once.
            assert metrics_log.read_jsonl(path) == [
                {"step": 0, "train/return": 1.0},
                {"step": 1, "train/return": 2.0},
            ]
    assert caplog.messages == [f"{path}: skipped a truncated last line 3"]


def test_read_jsonl_rejects_a_bad_line_before_the_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, \n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2"):
        metrics_log.read_jsonl(path)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("42", "line 2 is a number, not a row (an object)"),
        ("[]", "line 2 is a list, not a row (an object)"),
        ('{"step": "3600"}', "line 2 has step '3600': a row's step is a whole number"),
        ('{"step": 3600.0}', "line 2 has step 3600.0: a row's step is a whole number"),
    ],
)
def test_read_jsonl_names_a_line_that_is_no_row(tmp_path, line, said):
    # Each was a traceback in the resume, plot and results, which compare rows by step.
    path = tmp_path / "metrics.jsonl"
    path.write_text(f'{{"step": 0}}\n{line}\n{{"step": 2}}\n')
    with pytest.raises(ValueError) as error:
        metrics_log.read_jsonl(path)
    assert str(error.value) == f"{path}: {said}"


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path, caplog):
    # An editor that strips the file's last newline: the run's final row was cut as partial.
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, "final/return": 5.0}')
    metrics_log.drop_partial_line(path)
    assert path.read_text() == '{"step": 0}\n{"step": 1, "final/return": 5.0}\n'
    assert not caplog.records


# Killed mid-write, or a whole line of garbage: appended after, it stopped every reader.
@pytest.mark.parametrize("last", ['{"step": 1, "train/ret', "garbage{not json\n"])
def test_resumed_writer_appends_after_cutting_a_truncated_line(tmp_path, last):
    with metrics_log.Writer(tmp_path) as writer:
        writer.write(0, {"train/return": 1.0})
    with (tmp_path / "metrics.jsonl").open("a") as file:
        file.write(last)
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


@pytest.mark.parametrize("read", [read_scalars, served_scalars], ids=["accumulator", "server"])
def test_a_resumed_writers_purge_step_drops_the_earlier_rows_it_redoes(tmp_path, read):
    # The server's loader took the first resume's mark as the run's start, and purged
    # nothing: steps 2 and 3 shown twice, the first attempt's values among them.
    with metrics_log.Writer(tmp_path) as writer:  # Killed after step 3, checkpointed at 1.
        for step in (1, 2, 3):
            writer.write(step, {"train/return": float(step)})
    with metrics_log.Writer(tmp_path, purge_step=2) as writer:
        for step in (2, 3, 4):
            writer.write(step, {"train/return": 10.0 * step})
    assert read(tmp_path) == {"train/return": [(1, 1.0), (2, 20.0), (3, 30.0), (4, 40.0)]}
    # metrics.jsonl too holds one row a step: it held steps 2 and 3 twice.
    rows = metrics_log.read_jsonl(tmp_path / metrics_log.JSONL_NAME)
    assert [(row["step"], row["train/return"]) for row in rows] == read_scalars(tmp_path)[
        "train/return"
    ]


def test_event_files_of_writers_opened_in_one_second_read_in_the_order_they_were_written(
    tmp_path,
):
    for step in range(12):  # Writer ids pass from one digit to two.
        with metrics_log.Writer(tmp_path) as writer:
            writer.write(step, {"train/return": float(step)})
    assert read_scalars(tmp_path) == {"train/return": [(s, float(s)) for s in range(12)]}

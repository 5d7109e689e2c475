"""The overlap-returns benchmark trains each seed off and on once, then reads its folders."""

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("overlap_returns.py")


@pytest.mark.slow
def test_a_second_call_reads_the_finished_runs_and_gives_the_same_line(tmp_path):
    def line() -> dict:
        command = [sys.executable, str(SCRIPT), "--logdir", str(tmp_path), "--quick"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, done.stderr[-3000:]
        (text,) = done.stdout.splitlines()
        return json.loads(text)

    first = line()
    folders = sorted(path.name for path in (tmp_path / "cheetah_clipped").iterdir())
    assert folders == ["off_s0-cheetah_clipped", "on_s0-cheetah_clipped"]
    assert [result["overlap"] for result in first["results"]] == ["off", "on"]
    for result in first["results"]:
        (kl,), (clip_fraction,) = result["mean_kl"], result["mean_clip_fraction"]
        assert kl > 0 and 0 < clip_fraction < 1
        assert result["first_eval_step"] == [first["settings"]["steps"]]  # After its last phase.
    (off,), (on,) = (result["final_return"] for result in first["results"])
    assert first["on_over_off"] == [round(on / off, 3) if off else None]
    rows = (tmp_path / "cheetah_clipped" / "on_s0-cheetah_clipped" / "metrics.jsonl").read_text()
    assert line() == first  # Read again, not trained again: the same rows.
    assert (
        tmp_path / "cheetah_clipped" / "on_s0-cheetah_clipped" / "metrics.jsonl"
    ).read_text() == rows

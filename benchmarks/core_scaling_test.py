"""The core-scaling benchmark runs whole on one core (`--quick --cores 1`): one JSON line."""

import datetime
import json
import math
import pathlib
import subprocess
import sys

import core_scaling
import pytest

SCRIPT = pathlib.Path(__file__).with_name("core_scaling.py")


def test_the_default_core_counts_are_powers_of_two_then_all():
    assert core_scaling.default_cores(1) == [1]
    assert core_scaling.default_cores(2) == [1, 2]
    assert core_scaling.default_cores(6) == [1, 2, 4, 6]
    assert core_scaling.default_cores(8) == [1, 2, 4, 8]


@pytest.mark.slow
def test_the_quick_run_on_one_core_reports_train_and_env_speed():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--cores", "1"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    (line,) = [json.loads(text) for text in done.stdout.splitlines()]
    assert line["benchmark"] == "core_scaling" and line["preset"] == "cheetah_clipped"
    assert line["settings"]["backend"] == "mujoco"
    assert line["cores"] == 1 and len(line["cpus"]) == 1
    # Pinned before the env started: MuJoCo's batch took one thread, not the machine's count.
    assert line["env_threads"] == 1
    assert line["phases"] == 2 and line["steps"] == 2 * line["phase_steps"]
    by_phase = line["train_env_steps_per_sec_by_phase"]
    assert len(by_phase) == 2 and min(by_phase) > 0
    train, env = line["train_env_steps_per_sec"], line["env_only_env_steps_per_sec"]
    assert train == by_phase[1] > 0 and env > 0  # The mean leaves out the compiling phase.
    # Of two phases the steady rate is the second's, as the mean is (rounded apart).
    assert line["train_env_steps_per_sec_steady"] == pytest.approx(train, abs=1)
    assert line["train_over_env"] == round(train / env, 3) > 0
    assert line["train_speedup"] == line["env_only_speedup"] == line["train_steady_speedup"] == 1.0
    assert math.isfinite(line["final_return"])
    assert line["jax"] and line["commit"] and line["devices"][0].startswith("cpu:0")
    assert datetime.date.fromisoformat(line["date"])

"""The accelerator check runs whole on a CPU (`--quick`): a JSON line per env kind."""

import json
import math
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("accelerator_check.py")


@pytest.mark.slow
def test_the_quick_check_trains_every_backend_and_reports_each_run():
    # Every backend and network once: humanoid_clipped runs cheetah_clipped's code.
    checks = ["pendulum_jax", "breakout_minatar", "cheetah_clipped", "breakout"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--only", *checks],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["check"] for line in lines] == checks
    for line in lines:
        assert math.isfinite(line["final_return"]), line
        assert len(line["env_steps_per_sec"]) >= 1 and min(line["env_steps_per_sec"]) > 0
        assert line["wall_seconds"] > 0 and line["commit"] and line["jax"]
        # No accelerator here: every run acts and learns on the CPU, in one program.
        assert line["placement"] == "acting on cpu:0, learning on cpu:0", line
        assert line["devices"][0].startswith("cpu:0")
    assert done.stderr.splitlines()[-1].startswith("no accelerator: JAX found only its CPU")
    mujoco = [line for line in lines if line["check"].endswith("_clipped")]
    assert all(line["settings"]["backend"] == "mujoco" for line in mujoco)

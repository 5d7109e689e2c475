"""Acting on one device and learning on another: the same run as on one, and exact resume.

Two CPU devices stand in for a CPU and an accelerator: XLA_FLAGS must give them before
JAX starts, so each test runs its script in a fresh interpreter. A misplaced array fails
there as it would on a GPU machine (JAX refuses a program over arrays of two devices).
"""

import json
import os
import subprocess
import sys

import jax
import pytest

from batchrl.configs import presets, train_config
from batchrl.training import placement

_SCRIPT = """
import json, pathlib, sys
import jax, numpy as np
from batchrl.configs import presets, train_config
from batchrl.training import checkpoint, loop, run as run_lib

def devices_of(tree):
    return sorted({str(d) for leaf in jax.tree.leaves(tree) for d in leaf.devices()})

def train(rundir, **settings):
    if rundir is not None:
        rundir = pathlib.Path(rundir)
        rundir.mkdir(exist_ok=True)
    config = train_config.replace(presets.get(NAME), **SETTINGS, **settings)
    return run_lib.train(rundir, config)

def main():
    one = train(None)
    two = train(None, device="cpu:1", acting_device="cpu:0")
    params = [jax.tree.leaves(r.state.agent.learner.params) for r in (one, two)]
    out = {
        "returns": [[row["eval/return"] for row in r.metrics] for r in (one, two)],
        "max_param_difference": max(
            float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(*params)
        ),
        "learner": devices_of(two.state.agent), "acting": devices_of(two.state.train),
        "where": two.programs.where.describe(),
    }
    # Resume: runs interrupted after their first checkpoint and resumed, on one device and
    # split, against a whole split run.
    split = dict(device="cpu:1", acting_device="cpu:0")
    train(sys.argv[1] + "/whole", **split)
    save = checkpoint.save
    for name, settings in {"resumed_one": {}, "resumed": split}.items():
        calls = []
        def interrupted(*args, **kwargs):
            path = save(*args, **kwargs)
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt
            return path
        checkpoint.save = interrupted
        try:
            train(sys.argv[1] + "/" + name, **settings)
        except KeyboardInterrupt:
            out["interrupted_after"] = checkpoint.steps(sys.argv[1] + "/" + name + "/checkpoints")
        checkpoint.save = save
        resumed = train(sys.argv[1] + "/" + name, **settings)
    out["resumed_phases"] = len(resumed.metrics)
    last = int(resumed.state.phases)
    out["phases"] = train_config.replace(presets.get(NAME), **SETTINGS).phases
    def saved(name):
        return checkpoint.path_for(sys.argv[1] + f"/{name}/checkpoints", last).read_bytes()
    out["resume_exact"] = saved("whole") == saved("resumed")
    out["resume_as_on_one"] = saved("resumed_one") == saved("resumed")
    print("RESULT " + json.dumps(out))

if __name__ == "__main__":  # Env workers import this script again.
    main()
"""


def run_two_devices(tmp_path, name: str, **settings) -> dict:
    script = _SCRIPT.replace("NAME", repr(name)).replace("SETTINGS", repr(settings))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    path = tmp_path / "two_devices.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def check_split_run(out: dict) -> None:
    one, two = out["returns"]
    assert two == pytest.approx(one, rel=1e-5, abs=1e-4)
    assert out["max_param_difference"] < 1e-5
    assert out["learner"] == ["cpu:1"] and out["acting"] == ["cpu:0"]
    assert out["where"] == "acting on cpu:0, learning on cpu:1"
    assert out["interrupted_after"] == [1]
    assert out["phases"] >= 3 and out["resumed_phases"] == out["phases"] - 1
    assert out["resume_as_on_one"]


@pytest.mark.slow
def test_a_jax_native_run_split_over_two_devices_trains_and_resumes_as_on_one(tmp_path):
    settings = dict(
        steps=600, num_envs=4, max_length=50, update_every=4, eval_episodes=4, eval_every=1
    )
    out = run_two_devices(tmp_path, "pendulum_jax", **settings, final_episodes=4)
    check_split_run(out)
    assert out["resume_exact"]  # A JAX-native run resumes as if never stopped.


@pytest.mark.slow
def test_a_worker_env_run_split_over_two_devices_trains_and_resumes_as_on_one(tmp_path):
    settings = dict(
        steps=1536, num_envs=4, max_length=50, steps_per_update=128, eval_episodes=4, eval_every=1
    )
    out = run_two_devices(
        tmp_path, "cartpole", objective="clipped", **settings, final_episodes=4, num_minibatches=2
    )
    check_split_run(out)  # Host envs start anew on resume, on one device as on two.


def test_an_unknown_device_setting_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^unknown device 'xpu': use one of \('auto', 'cpu'"):
        train_config.replace(presets.get("pendulum"), device="xpu")
    with pytest.raises(ValueError, match=r"^unknown acting_device 'gpu:x'"):
        train_config.replace(presets.get("pendulum"), acting_device="gpu:x")


def test_a_device_jax_lacks_is_refused_naming_the_setting_and_what_exists():
    missing = "tpu" if jax.devices()[0].platform == "gpu" else "gpu"
    with pytest.raises(ValueError, match=rf"^acting_device='{missing}', but JAX finds no"):
        placement.device(missing, "acting_device")
    count = len(jax.devices("cpu"))
    with pytest.raises(ValueError, match=rf"^device='cpu:{count}', but JAX has {count} cpu"):
        placement.device(f"cpu:{count}")


def test_host_envs_act_on_the_cpu_and_jax_native_ones_where_they_learn():
    cpu = jax.devices("cpu")[0]
    config = presets.get("cheetah_clipped")
    assert placement.host_acting_device(config) == cpu
    jax_native = presets.get("pendulum_jax")
    assert placement.learner_device(jax_native) == jax.devices()[0]

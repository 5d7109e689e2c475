"""Acting on one device and learning on another: the same run as on one, and exact resume.

Two CPU devices stand in for a CPU and an accelerator: XLA_FLAGS must give them before
JAX starts, so each test runs its script in a fresh interpreter. A misplaced array fails
there as it would on a GPU machine (JAX refuses a program over arrays of two devices).
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest

from batchrl.configs import presets, train_config
from batchrl.conftest import xla_flags_as_users
from batchrl.training import placement

_SCRIPT = """
import hashlib, json, pathlib, sys
import jax
from batchrl.configs import presets, train_config
from batchrl.training import checkpoint, metrics_log, run as run_lib

SPLIT = dict(device="cpu:1", acting_device="cpu:0")

def devices_of(tree):
    return sorted({str(d) for leaf in jax.tree.leaves(tree) for d in leaf.devices()})

def train(rundir, interrupt, **settings):
    # A run in `rundir`; with `interrupt`, stopped after its first checkpoint and resumed.
    rundir.mkdir()
    config = train_config.replace(presets.get(NAME), **SETTINGS, **settings)
    save, calls = checkpoint.save, []
    def interrupted(*args, **kwargs):
        path = save(*args, **kwargs)
        calls.append(1)
        if interrupt and len(calls) == 1:
            raise KeyboardInterrupt
        return path
    checkpoint.save = interrupted
    try:
        result = run_lib.train(rundir, config)
    except KeyboardInterrupt:
        stopped = checkpoint.steps(rundir / "checkpoints")
        checkpoint.save = save
        result = run_lib.train(rundir, config)
    else:
        stopped = None
    checkpoint.save = save
    rows = metrics_log.read_jsonl(rundir / "metrics.jsonl")
    last = checkpoint.path_for(rundir / "checkpoints", config.phases).read_bytes()
    return {
        "returns": {row["step"]: row["eval/return"] for row in rows},
        "final": hashlib.sha256(last).hexdigest(),
        "stopped_after": stopped,
        "phases_after_resume": len(result.metrics),
        "phases": config.phases,
        "learner": devices_of(result.state.agent),
        "acting": devices_of(result.state.train),
        "where": result.programs.where.describe(),
    }

def main():
    folder = pathlib.Path(sys.argv[1])
    runs = {
        "one_resumed": train(folder / "one_resumed", True),
        "split_resumed": train(folder / "split_resumed", True, **SPLIT),
    }
    if sys.argv[2] == "whole":
        runs["split_whole"] = train(folder / "split_whole", False, **SPLIT)
    print("RESULT " + json.dumps(runs))

if __name__ == "__main__":  # Env workers import this script again.
    main()
"""


def run_two_devices(tmp_path, name: str, whole: bool, **settings) -> dict:
    """Runs of preset `name` stopped after their first checkpoint and resumed: on one
    device, and split (acting on cpu:0, learning on cpu:1); with `whole`, a split run
    never stopped."""
    script = _SCRIPT.replace("NAME", repr(name)).replace("SETTINGS", repr(settings))
    flags = xla_flags_as_users("--xla_force_host_platform_device_count=2")
    env = {**os.environ, "XLA_FLAGS": flags}
    path = tmp_path / "two_devices.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path), str(tmp_path), "whole" if whole else "-"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def check_split_runs(runs: dict) -> None:
    one, split = runs["one_resumed"], runs["split_resumed"]
    assert one["phases"] >= 3 and one["stopped_after"] == split["stopped_after"] == [1]
    assert split["phases_after_resume"] == split["phases"] - 1
    # Every phase's evaluation and the last checkpoint, byte for byte, as on one device.
    assert split["returns"] == pytest.approx(one["returns"], rel=1e-5, abs=1e-4)
    assert split["final"] == one["final"]
    assert split["learner"] == ["cpu:1"] and split["acting"] == ["cpu:0"]
    assert split["where"] == "acting on cpu:0, learning on cpu:1"
    assert one["learner"] == one["acting"] == ["cpu:0"]


@pytest.mark.slow
def test_a_jax_native_run_split_over_two_devices_trains_and_resumes_as_on_one(tmp_path):
    settings = dict(steps=600, num_envs=4, max_length=50, update_every=4, eval_every=1)
    runs = run_two_devices(tmp_path, "pendulum_jax", True, **settings, eval_episodes=4)
    check_split_runs(runs)
    # A JAX-native run resumes as if it never stopped.
    assert runs["split_whole"]["final"] == runs["split_resumed"]["final"]
    assert runs["split_whole"]["returns"] == runs["split_resumed"]["returns"]


@pytest.mark.slow
def test_a_worker_env_run_split_over_two_devices_trains_and_resumes_as_on_one(tmp_path):
    # 3 phases of one update of 32 steps on 4 envs.
    settings = dict(objective="clipped", steps=384, num_envs=4, max_length=50)
    settings.update(steps_per_update=32, num_minibatches=2, eval_every=1, eval_episodes=4)
    # Host envs start anew on resume, on one device as on two.
    check_split_runs(run_two_devices(tmp_path, "cartpole", False, **settings))


def test_an_unknown_device_setting_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^unknown device 'xpu': use one of \('auto', 'cpu'"):
        train_config.replace(presets.get("pendulum"), device="xpu")
    with pytest.raises(ValueError, match=r"^unknown acting_device 'gpu:x'"):
        train_config.replace(presets.get("pendulum"), acting_device="gpu:x")
    with pytest.raises(ValueError, match=r"devices by its index from 0, such as 'gpu:1'$"):
        train_config.replace(presets.get("pendulum"), device="cpu:-1")


def test_a_device_jax_lacks_is_refused_naming_the_setting_and_what_exists():
    missing = "tpu" if jax.devices()[0].platform == "gpu" else "gpu"
    with pytest.raises(ValueError, match=rf"^acting_device='{missing}', but JAX finds no") as error:
        placement.device(missing, "acting_device")
    section = re.search(r"\(README, ([^)]+)\)", str(error.value)).group(1)  # Where to install.
    readme = pathlib.Path(__file__).parents[2] / "README.md"
    assert f"\n## {section}\n" in readme.read_text()
    count = len(jax.devices("cpu"))
    # A run saved with a device this machine lacks resumes with another: the error says so.
    with pytest.raises(ValueError, match=rf"^device='cpu:{count}', but JAX has {count} cpu"):
        placement.device(f"cpu:{count}")
    with pytest.raises(ValueError, match=r"\(a resume may set it anew\)$"):
        placement.device(f"cpu:{count}")
    with pytest.raises(ValueError, match=r"; a resume may set learner_devices anew\)$"):
        first = jax.devices()[0]
        config = train_config.replace(presets.get("pendulum_jax"), learner_devices=count + 1)
        placement.check_data_parallel(config, placement.Placement(first, first, count + 1))


def test_host_envs_act_on_the_cpu_and_jax_native_ones_where_they_learn():
    cpu = jax.devices("cpu")[0]
    config = presets.get("cheetah_clipped")
    assert placement.host_acting_device(config) == cpu
    jax_native = presets.get("pendulum_jax")
    assert placement.learner_device(jax_native) == jax.devices()[0]


@pytest.mark.parametrize("name", ["pendulum_jax", "pendulum"])
def test_a_data_parallel_learner_off_the_first_device_is_refused_in_one_line(tmp_path, name):
    # Its update spans JAX's first devices and worker envs' calls run on the first: on
    # cpu:1 a JAX-native run learned on both while saying cpu:1, and a worker-env run
    # crashed in JAX with "tuple.index(x): x not in tuple".
    settings = ["--set", "learner_devices=2", "--set", "device=cpu:1", "--set", "steps=100"]
    command = ["-m", "batchrl.scripts.train", "--logdir", str(tmp_path), "--config", name]
    flags = xla_flags_as_users("--xla_force_host_platform_device_count=2")
    done = subprocess.run(
        [sys.executable, *command, *settings],
        capture_output=True,
        text=True,
        env={**os.environ, "XLA_FLAGS": flags},
        timeout=280,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        "batchrl: error: learner_devices=2 learns on JAX's first devices (cpu:0, cpu:1), "
        "got device='cpu:1': set device=auto or cpu:0"
    )
    assert not list(tmp_path.iterdir())

"""The PPO update split over several devices: the same result as on one, within float error.

CPU tests get two devices from XLA_FLAGS=--xla_force_host_platform_device_count=2, which
must be set before JAX starts, so each test runs its script in a fresh interpreter.
"""

import json
import os
import subprocess
import sys

import pytest

from batchrl.ppo import config as config_lib
from batchrl.ppo import sgd
from batchrl.scripts import evaluate, train
from batchrl.training import metrics_log

_SETUP = """
import json, jax, numpy as np
from batchrl.envs.jax import classic, jax_env
from batchrl.ppo import config as config_lib, sgd
from batchrl.testing import loop_runs
"""

_TRAIN = """
def train(objective, devices):
    if objective == "clipped":
        config = config_lib.ClippedConfig(steps_per_update=64, num_minibatches=4,
                                          update_epochs=2, learner_devices=devices)
        env = jax_env.VmapBatch(classic.make("Pendulum-v1"), 4)
        metrics, state = loop_runs.train(config, env, 64, 200, phases=2, max_length=200)
    else:
        config = config_lib.PenaltyConfig(update_every=4, batch_size=4,
                                   update_epochs=2, learner_devices=devices)
        env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 20), 4)
        metrics, state = loop_runs.train(config, env, 40, 40, phases=2, max_length=40)
    params = jax.tree.leaves(state.agent.learner.params)
    return params, metrics[-1]["train/policy_loss"], str(params[0].sharding)

out = {"devices": jax.local_device_count()}
for objective in ("clipped",):  # kl_penalty: the train command's test below.
    one, loss_one, _ = train(objective, 1)
    two, loss_two, sharding = train(objective, 2)
    out[objective] = {
        "max_param_difference": max(float(np.abs(a - b).max()) for a, b in zip(one, two)),
        "losses": [loss_one, loss_two],
        "sharding": sharding,
    }

def hlo(devices):
    data = {"x": jax.numpy.ones((64, 3)), "y": jax.numpy.ones((64,))}
    loss = lambda p, b: (((b["x"] @ p - b["y"]) ** 2).mean(), {})
    def update(params):
        return sgd.run_epochs(sgd.optimizer(1e-3, None), params, sgd.optimizer(1e-3, None)
                              .init(params), data, loss, jax.random.key(0), epochs=1,
                              batch_size=16, devices=devices)[0]
    return jax.jit(update).lower(jax.numpy.zeros(3)).compile().as_text()

out["all_reduce"] = ["all-reduce" in hlo(1), "all-reduce" in hlo(2)]
try:
    sgd.data_parallel(2, 15)
except ValueError as error:
    out["uneven"] = str(error)
print(json.dumps(out))
"""


def _run(script: str) -> dict:
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
def test_the_clipped_objective_learns_the_same_on_two_devices_as_on_one():
    out = _run(_SETUP + _TRAIN)
    assert out["devices"] == 2
    for objective in ("clipped",):
        result = out[objective]
        assert result["max_param_difference"] < 1e-5, result
        assert result["losses"][0] == pytest.approx(result["losses"][1], rel=1e-3, abs=1e-6)
        assert "'data': 2" in result["sharding"]  # The params live on both devices.
    # XLA sums the devices' gradients: the update is split, not run twice.
    assert out["all_reduce"] == [False, True]
    assert out["uneven"] == "minibatches of 15 rows do not split over learner_devices=2"


def test_more_devices_than_the_process_has_is_named(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"learner_devices=2, but this process has 1 local"):
        sgd.data_parallel(2, 64)
    # Before the run's first line, which named a run folder the error then removed.
    argv = ["--config", "pendulum_jax", "--logdir", str(tmp_path), "--set", "learner_devices=2"]
    assert train.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "learner_devices=2, but this process has 1" in captured.err
    with pytest.raises(ValueError, match="learner_devices must be at least 1, got 0"):
        config_lib.ClippedConfig(learner_devices=0)


@pytest.mark.slow
def test_the_train_command_with_worker_envs_on_two_devices(tmp_path):
    # The KL-penalty objective; host calls in a program over two devices are
    # io_callbacks placed on the first one. The one-device run is in this process.
    tiny = ["--config", "pendulum", "--set", "steps=800", "--set", "eval_episodes=4"]
    tiny += ["--set", "num_envs=4", "--set", "update_every=4", "--set", "max_length=200"]
    tiny += ["--set", "update_epochs=2", "--set", "policy_layers=16,16"]
    tiny += ["--set", "value_layers=16,16"]
    assert train.main(["--logdir", str(tmp_path / "1"), *tiny]) == 0
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}
    command = [sys.executable, "-m", "batchrl.scripts.train", "--logdir", str(tmp_path / "2")]
    command += [*tiny, "--set", "learner_devices=2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # The first line names every device the learner splits its minibatches over, and the
    # acting state's copies on them (it said "acting on cpu:0" of a state on both).
    where = "; acting on cpu:0 + cpu:1 (copied), learning on cpu:0 + cpu:1; "
    assert where in result.stdout.splitlines()[0]
    rows = {}
    for devices in (1, 2):
        (folder,) = (tmp_path / str(devices)).iterdir()
        rows[devices] = metrics_log.read_jsonl(folder / "metrics.jsonl")
    assert [row["step"] for row in rows[2]] == [800]
    for one, two_devices in zip(rows[1], rows[2], strict=True):
        for key in ("train/return", "train/policy_loss", "train/value_loss", "eval/return"):
            assert two_devices[key] == pytest.approx(one[key], rel=1e-3), key
    # Here, on one device: evaluate scores it (its update's devices are no concern of
    # scoring), and a resume goes on with learner_devices=1 (both were refused).
    (folder,) = (tmp_path / "2").iterdir()
    assert evaluate.main(["--logdir", str(folder), "--episodes", "4"]) == 0
    resume = ["--logdir", str(tmp_path / "2"), "--timestamp", folder.name.split("-")[0]]
    assert train.main([*resume, "--set", "steps=1600", "--set", "learner_devices=1"]) == 0
    resumed = metrics_log.read_jsonl(folder / "metrics.jsonl")
    assert [row["step"] for row in resumed] == [800, 1600]
    # An env that raises mid-phase: its one line, not an abort of XLA's devices waiting
    # for each other in the update.
    command[command.index(str(tmp_path / "2"))] = str(tmp_path / "3")
    command += ["--set", "env=batchrl.testing.mock:FailingEnv", "--set", "max_length=20"]
    command += ["--set", "env_kwargs={where: step, at: 150}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1].startswith(
        "batchrl: error: ValueError: FailingEnv failed on purpose in step (raised by env "
    )

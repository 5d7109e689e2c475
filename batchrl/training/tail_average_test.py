import logging
import pathlib
import shutil

import jax
import numpy as np
import pytest

from batchrl.configs import presets, train_config
from batchrl.scripts import train
from batchrl.training import (
    checkpoint,
    environments,
    loop,
    metrics_log,
    run_folder,
    tail_average,
    terminal,
)

# Pendulum, compiled: five phases of 200 env steps, every phase kept.
SETTINGS = {
    "num_envs": 4,
    "update_every": 4,
    "max_length": 50,
    "eval_episodes": 4,
    "final_episodes": 4,
    "policy_layers": "32,32",
    "value_layers": "32,32",
    "steps": 1000,
    "keep_checkpoints": 5,
}
pytestmark = pytest.mark.xdist_group("tail_average_test")


def command(logdir: pathlib.Path, **settings: object) -> list[str]:
    args = ["--logdir", str(logdir), "--config", "pendulum_jax", "--timestamp", "t0"]
    for name, value in {**SETTINGS, **settings}.items():
        args += ["--set", f"{name}={value}"]
    return args


def folder(logdir: pathlib.Path) -> pathlib.Path:
    (only,) = logdir.iterdir()
    return only


def params(run: pathlib.Path, phase: int):
    """The policy and value parameters a run's checkpoint of `phase` holds."""
    config = run_folder.read_config(run)
    _, state = loop.build(config, environments.build(config)[0])
    path = checkpoint.path_for(run_folder.checkpoints(run), phase)
    return checkpoint.load(path, state.agent.learner.params, ("agent", "learner", "params"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, pathlib.Path]:
    plain, averaged = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("averaged")
    assert train.main(command(plain)) == 0
    assert train.main(command(averaged, average_last=3)) == 0
    return {"plain": folder(plain), "averaged": folder(averaged)}


def test_mean_is_leafwise_in_each_leafs_dtype():
    trees = [{"w": np.full(2, x, np.float32), "b": np.float32(x)} for x in (1.0, 2.0, 6.0)]
    mean = tail_average.mean(trees)
    assert mean["w"].dtype == np.float32 and mean["w"].tolist() == [3.0, 3.0]
    assert float(mean["b"]) == 3.0
    with pytest.raises(ValueError, match="the mean of no parameters"):
        tail_average.mean([])


def test_the_final_policy_averages_the_last_phases_and_changes_nothing_before(runs):
    plain, averaged = runs["plain"], runs["averaged"]
    for phase in (3, 4):  # Training is the same run up to its final phase.
        a = checkpoint.path_for(plain / "checkpoints", phase).read_bytes()
        assert checkpoint.path_for(averaged / "checkpoints", phase).read_bytes() == a
    expected = tail_average.mean([params(plain, phase) for phase in (3, 4, 5)])
    final = params(averaged, 5)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, atol=1e-6), final, expected))
    assert not np.allclose(
        jax.tree.leaves(final)[0], jax.tree.leaves(params(plain, 5))[0], atol=1e-6
    )
    rows = metrics_log.read_jsonl(averaged / "metrics.jsonl")
    assert rows[-1]["final/averaged_phases"] == 3.0
    assert "final/averaged_phases" not in metrics_log.read_jsonl(plain / "metrics.jsonl")[-1]


@pytest.mark.slow
def test_a_run_resumed_in_its_last_phases_averages_the_same_ones(
    runs, tmp_path, monkeypatch, caplog
):
    original, calls = terminal.summary_line, []
    stopped = tmp_path / "stopped"

    def interrupted(*args, **kwargs):  # After phase 4 was checkpointed.
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(terminal, "summary_line", interrupted)
        assert train.main(command(stopped, average_last=3)) == 130
    assert checkpoint.steps(folder(stopped) / "checkpoints") == [1, 2, 3, 4]
    gap = tmp_path / "gap"
    shutil.copytree(stopped, gap)
    # Phase 2, which the final policy does not average, was read and stopped the resume.
    checkpoint.path_for(folder(stopped) / "checkpoints", 2).write_bytes(b"cut")
    assert train.main(command(stopped, average_last=3)) == 0
    whole = checkpoint.path_for(runs["averaged"] / "checkpoints", 5).read_bytes()
    assert checkpoint.path_for(folder(stopped) / "checkpoints", 5).read_bytes() == whole
    # Without phase 3's checkpoint the final policy averaged phases 2, 4 and 5, and said 3.
    checkpoint.path_for(folder(gap) / "checkpoints", 3).unlink()
    with caplog.at_level(logging.WARNING, "batchrl.training"):
        assert train.main(command(gap, average_last=3)) == 0
    said = [r.getMessage() for r in caplog.records if "final policy averages" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(
        ": the final policy averages its last 2 phases, not 3"
    )
    assert metrics_log.read_jsonl(folder(gap) / "metrics.jsonl")[-1]["final/averaged_phases"] == 2
    expected = tail_average.mean([params(runs["plain"], phase) for phase in (4, 5)])
    final = params(folder(gap), 5)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, atol=1e-6), final, expected))


def test_average_last_needs_every_phase_it_averages_kept():
    config = presets.get("pendulum_jax")
    with pytest.raises(ValueError, match="average_last=4 needs checkpoint_every=1 and keep_che"):
        train_config.replace(config, average_last=4)
    with pytest.raises(ValueError, match="average_last must be at least 1, got 0"):
        train_config.replace(config, average_last=0)
    assert train_config.replace(config, average_last=3).average_last == 3

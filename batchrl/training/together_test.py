import dataclasses
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types

import jax
import numpy as np
import pytest

import batchrl
from batchrl import configs
from batchrl.bridge import seeds as seeds_lib
from batchrl.configs import train_config
from batchrl.envs.host import errors
from batchrl.scripts import evaluate, plot, sweep, table, train
from batchrl.testing import interrupt
from batchrl.training import (
    checkpoint,
    device_memory,
    diverged_seeds,
    environments,
    metrics_log,
    placement,
    results,
    run,
    run_folder,
    together,
    together_checks,
    together_host,
    together_memory,
    together_run,
)

# Two phases of 4 Pendulum envs, an update every 4 episodes of 50 steps, evaluated each.
PENALTY = ["steps=800", "num_envs=4", "update_every=4", "max_length=50", "eval_every=1"]
PENALTY += ["policy_layers=16,16", "value_layers=16,16", "final_episodes=4"]
# CartPole's episodes end at different steps in each env and seed: lanes stop apart.
CLIPPED = ["objective=clipped", "steps=1024", "num_envs=4", "steps_per_update=32"]
CLIPPED += ["num_minibatches=2", "update_epochs=2", "phase_steps=128", "eval_every=1"]
CLIPPED += ["policy_layers=16", "value_layers=16", "final_episodes=8"]


def config_of(preset: str, settings: list[str], seed: int) -> train_config.TrainConfig:
    config = configs.get(preset)
    for assignment in [*settings, f"seed={seed}"]:
        config = configs.parse_override(config, assignment)
    return config


def test_seeds_that_update_in_different_phases_train_on_with_the_mean_of_those_that_did(capsys):
    # The penalty objective updates once a seed's memory holds its episodes: CartPole's
    # seeds fill theirs apart, and the terminal's mean of a row key some seeds lacked
    # was a KeyError that ended the run.
    settings = ["num_envs=4", "phase_steps=200", "steps=1600", "policy_layers=16"]
    settings += ["value_layers=16", "final_episodes=4", "eval_every=4"]
    runs = together_run.train(
        [None] * 4, [config_of("cartpole_jax", settings, s) for s in range(4)]
    )
    updated = [["train/kl" in row for row in result.metrics] for result in runs]
    apart = [phase for phase, row in enumerate(zip(*updated, strict=True)) if 0 < sum(row) < 4]
    assert apart, updated  # Some seeds updated in a phase where others did not.
    rows = [result.metrics[apart[0]] for result in runs]
    kl = np.mean([row["train/kl"] for row in rows if "train/kl" in row])  # Of those that did.
    printed = capsys.readouterr()
    lines = [line for line in printed.out.splitlines() if line.startswith("phase ")]
    assert f"  kl {kl:.4g}  " in lines[apart[0]], lines[apart[0]]
    # "phase 1  env steps 200" is a seed's; the progress line counts the four's steps.
    assert lines[0].startswith("phase 1  env steps 200  ")
    assert printed.err.splitlines()[0].startswith(
        "[##------------------]  12%  800/6,400 steps of 4 seeds  "
    )


def assert_each_seed_trains_as_its_solo_run(preset, settings, seeds, rel, abs_):
    solo_configs = [config_of(preset, settings, seed) for seed in seeds]
    runs = together_run.train([None] * len(seeds), solo_configs)
    for config, together_result in zip(solo_configs, runs, strict=True):
        solo = run.train(None, config)
        assert len(together_result.metrics) == len(solo.metrics) == config.phases
        for ours, theirs in zip(together_result.metrics, solo.metrics, strict=True):
            assert ours["step"] == theirs["step"]
            for key in ("train/return", "train/kl", "train/entropy", "eval/return", "eval/count"):
                # An update's metrics are in the rows of phases that trained one: the same.
                assert (key in ours) == (key in theirs), (key, ours["step"])
                if key in theirs:
                    # Mapped, a sum may add in another order: float error, which training grows.
                    assert ours[key] == pytest.approx(theirs[key], rel=rel, abs=abs_), key
        assert any("train/kl" in row for row in solo.metrics)  # Some phase trained.
    curves = {tuple(row["train/return"] for row in result.metrics) for result in runs}
    assert len(curves) == len(seeds)  # Each seed is its own run.


@pytest.mark.slow
@pytest.mark.parametrize(
    "preset, settings", [("pendulum_jax", PENALTY), ("cartpole_jax", CLIPPED)], ids=str
)
def test_each_seed_trains_as_its_solo_run(preset, settings):
    assert_each_seed_trains_as_its_solo_run(preset, settings, (0, 5, 9), 1e-3, 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "preset, settings, phases",
    # Clipped: 48 steps a phase, rollouts of 32: every other phase ends mid-rollout.
    [("pendulum_jax", PENALTY, 4), ("cartpole_jax", [*CLIPPED, "phase_steps=192", "steps=768"], 4)],
    ids=["penalty", "clipped"],
)
def test_an_interrupted_together_run_resumes_exactly(
    tmp_path, monkeypatch, capsys, preset, settings, phases
):
    settings = [item for assignment in settings for item in ("--set", assignment)]
    args = ["--config", preset, "--seeds", "1", "2", "--timestamp", "s{seed}", *settings]
    whole, stopped, killed = tmp_path / "whole", tmp_path / "stopped", tmp_path / "killed"
    first = tmp_path / "first"
    assert train.main(["--logdir", str(whole), *args]) == 0
    for _ in range(2):  # Stopped after phase 1, resumed, stopped after phase 2.
        with interrupt.ctrl_c_at_call(monkeypatch, together_run, "_phase", 2):
            assert train.main(["--logdir", str(stopped), *args]) == 130
        out = capsys.readouterr().out.splitlines()
        saved = [line for line in out if line.startswith("interrupted: ")]
        assert [line.rsplit(" in ", 1)[1] for line in saved] == [  # Each seed's, named.
            str(stopped / f"s{seed}-{preset}") for seed in (1, 2)
        ]
    assert train.main(["--logdir", str(stopped), *args]) == 0
    # Killed between the seeds' checkpoints of the last phase: seed 2 goes back a phase.
    shutil.copytree(whole, killed)
    checkpoint.path_for(killed / f"s1-{preset}" / "checkpoints", phases).unlink()
    assert train.main(["--logdir", str(killed), *args]) == 0
    # Killed between the seeds' first checkpoints: phase 0, as built, is every seed's.
    shutil.copytree(whole, first)
    for name, kept in ((f"s1-{preset}", [1]), (f"s2-{preset}", [])):
        for phase in checkpoint.steps(first / name / "checkpoints"):
            if phase not in kept:
                checkpoint.path_for(first / name / "checkpoints", phase).unlink()
    assert train.main(["--logdir", str(first), *args]) == 0
    for name in (f"s1-{preset}", f"s2-{preset}"):
        theirs = whole / name / "checkpoints"
        assert checkpoint.steps(theirs)[-1] == phases
        expected = checkpoint.path_for(theirs, phases).read_bytes()
        for folder in (stopped, killed, first):
            assert (
                checkpoint.path_for(folder / name / "checkpoints", phases).read_bytes() == expected
            )
    if preset == "cartpole_jax":  # Its rollout, emptied at the last phase's end, is left out.
        assert b"__fresh__" in expected


@pytest.mark.slow  # Three together-runs: seconds each.
def test_seeds_that_keep_no_common_phase_are_refused_in_one_line(tmp_path, capsys):
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
    args += ["--timestamp", "s{seed}", *(x for a in PENALTY for x in ("--set", a))]
    assert train.main([*args, "--set", "steps=400"]) == 0
    capsys.readouterr()
    with run_folder.held(tmp_path / "s2-pendulum_jax"):  # Seed 2 trained by another process.
        assert train.main([*args, "--set", "steps=400"]) == 2
    assert "s2-pendulum_jax' is being trained by another process" in capsys.readouterr().err
    # Seed 1 at phase 1, seed 2 at phase 2 without its checkpoint of phase 1.
    checkpoint.path_for(tmp_path / "s1-pendulum_jax" / "checkpoints", 2).unlink()
    checkpoint.path_for(tmp_path / "s2-pendulum_jax" / "checkpoints", 1).unlink()
    capsys.readouterr()
    assert train.main([*args, "--set", "steps=800"]) == 1  # Raised: seed 2 trains on too.
    assert capsys.readouterr().err == (
        "batchrl: error: the seeds resume from different phases (seed 1 at phase 1, seed 2 at "
        "phase 2) and seed 2 keeps no checkpoint of phase 1: resume each on its own "
        "(--seed 1 --timestamp s1, --seed 2 --timestamp s2; a sweep: without --together)\n"
    )
    assert train.main(["--logdir", str(tmp_path), "--timestamp", "s1"]) == 0


@pytest.mark.slow  # Three runs: seconds each.
def test_a_deleted_seed_folder_does_not_send_the_other_seeds_back_to_the_start(tmp_path, capsys):
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
    args += ["--timestamp", "s{seed}", *(x for a in PENALTY for x in ("--set", a))]
    args += ["--set", "steps=400"]
    assert train.main(args) == 0
    rows = (tmp_path / "s1-pendulum_jax" / "metrics.jsonl").read_text()
    shutil.rmtree(tmp_path / "s2-pendulum_jax")
    capsys.readouterr()
    raised = [*args, "--set", "steps=800"]  # Seed 1 trains on: it would go back to phase 0.
    assert train.main(raised) == 1  # Seed 1's two phases kept, not trained again from phase 0.
    assert capsys.readouterr().err == (
        "batchrl: error: the seeds resume from different phases (seed 1 at phase 2, seed 2 at "
        "phase 0) and seed 2 trained none: resume each on its own "
        "(--seed 1 --timestamp s1, --seed 2 --timestamp s2; a sweep: without --together)\n"
    )
    assert (tmp_path / "s1-pendulum_jax" / "metrics.jsonl").read_text() == rows
    assert not (tmp_path / "s2-pendulum_jax").exists()
    # As told: seed 2 starts on its own, in the folder of its name (it started seed 0).
    alone = [*args[:4], "--seed", "2", "--timestamp", "s2", *args[9:]]
    assert train.main(alone) == 0
    assert run_folder.read_config(tmp_path / "s2-pendulum_jax").seed == 2


def test_a_together_run_resumes_with_its_folders_timestamp_added(tmp_path, capsys, caplog):
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
    args += [*(x for a in PENALTY for x in ("--set", a)), "--set", "steps=400", "overlap=on"]
    assert train.main(args) == 0
    folders = sorted(path.name for path in tmp_path.iterdir())
    stamp = folders[0].split("-seed")[0]
    assert folders == [f"{stamp}-seed1-pendulum_jax", f"{stamp}-seed2-pendulum_jax"]
    files = sorted(tmp_path.glob("*/*"))
    capsys.readouterr()
    caplog.clear()
    assert train.main([*args, "--timestamp", stamp]) == 0  # As docs/training.md says.
    # overlap=on, which seeds together never do, is said on this path too.
    assert [r.getMessage() for r in caplog.records if "overlap='on'" in r.getMessage()] == [
        "overlap='on' is not used when seeds train together: their one program acts and "
        "learns in turn (train each seed on its own to overlap)"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == folders
    for folder in folders:  # Finished: resumed at its last phase, nothing trained again.
        assert len((tmp_path / folder / "metrics.jsonl").read_text().splitlines()) == 2
    assert sorted(tmp_path.glob("*/*")) == files  # No event file of no events.
    assert capsys.readouterr().out == "".join(
        f"run folder {tmp_path / folder} has trained all its 2 phases\n" for folder in folders
    )
    saved = [tmp_path / folder / "config.yaml" for folder in folders]
    for path in saved:  # Lowered by hand in both: not "has trained all its 1 phase".
        path.write_text(path.read_text().replace("steps: 400", "steps: 200"))
    assert train.main([*args[:2], "--seeds", "1", "2", "--timestamp", stamp]) == 1
    assert capsys.readouterr().err.endswith(
        f"batchrl: error: run {folders[0]!r} trained 2 phases, past steps=200 (1) in its "
        "config.yaml: a budget may be raised, not lowered\n"
    )
    for path in saved:
        path.write_text(path.read_text().replace("steps: 200", "steps: 400"))
    assert train.main(["--logdir", str(tmp_path), "--timestamp", stamp]) == 2  # No --seeds.
    assert capsys.readouterr().err == (
        f"batchrl: error: no run with timestamp {stamp!r} in {str(tmp_path)!r} to resume; "
        "its seeds resume together with --seeds 1 2\n"
    )


def test_a_sweep_too_big_for_memory_is_one_line(monkeypatch):
    config = config_of("pendulum_jax", PENALTY, 0)
    env, _ = environments.build(config)
    group, _ = together.build([config], env)
    per_seed = group.solo.storage_bytes
    monkeypatch.setattr(device_memory, "available", lambda device: 3 * per_seed + 1)
    seeds = [dataclasses.replace(config, seed=seed) for seed in range(10)]
    with pytest.raises(MemoryError) as raised:
        together.build(seeds, env)
    message = str(raised.value)
    assert "\n" not in message
    assert f"the storage of 10 seeds takes {device_memory.human(10 * per_seed)}" in message
    assert message.endswith("at most 3 seeds fit")


@pytest.mark.slow  # Compiles a phase of seeds: tens of seconds.
def test_a_phase_too_big_for_memory_is_refused_naming_seeds_that_do_fit(monkeypatch):
    # A device of `size` bytes: what is free is what its live arrays leave. Collected
    # first: an interrupted run's arrays, or an earlier test's, freed whenever the
    # garbage collector came by would make the free memory a matter of chance.
    size = 0

    def live():
        gc.collect()
        return sum(array.nbytes for array in jax.live_arrays())

    monkeypatch.setattr(device_memory, "available", lambda device: size - live())
    measured = {}
    real_check = together_memory.check_phase

    def measure(peak, seeds, held, device):
        measured.update(needs=peak.outputs + peak.temporaries, live=live())
        raise InterruptedError

    seeds = [config_of("pendulum_jax", PENALTY, seed) for seed in range(10)]
    with monkeypatch.context() as patched:
        patched.setattr(together_memory, "check_phase", measure)
        size = 2**62
        with pytest.raises(InterruptedError):
            together_run.train([None] * 10, seeds)
    # The seeds' storage fits such a device; their phase's outputs and temporaries not.
    size = measured["live"] + measured["needs"] // 2
    with pytest.raises(MemoryError) as raised:
        together_run.train([None] * 10, seeds)
    message = str(raised.value)
    del raised
    assert together_memory.check_phase is real_check and "\n" not in message
    assert message.startswith("a train phase of 10 seeds needs ")
    most = int(message.split("at most ")[1].split(" seeds fit")[0])
    assert 1 <= most < 10, message
    runs = together_run.train([None] * most, seeds[:most])  # As many as it names do fit.
    assert [len(result.metrics) for result in runs] == [seeds[0].phases] * most


def test_the_first_phases_train_seconds_count_the_compile_before_it(monkeypatch):
    # The memory check compiles the phase before its timer starts: a together-run's
    # wall-clock (sweep lines, `plot --x hours`) left its compile out, a solo run's not.
    real_peak = together_memory.peak

    def slow_peak(*args):
        time.sleep(2.0)  # A compile of 2 s more.
        return real_peak(*args)

    monkeypatch.setattr(together_memory, "peak", slow_peak)
    runs = together_run.train([None] * 2, [config_of("pendulum_jax", PENALTY, s) for s in (0, 1)])
    assert all(result.metrics[0]["perf/train_seconds"] >= 2.0 for result in runs)


def test_configs_that_differ_beyond_their_seed_are_refused():
    config = config_of("pendulum_jax", PENALTY, 0)
    other = dataclasses.replace(config, seed=1, num_envs=8)
    with pytest.raises(ValueError, match=r"seed: seed 1's num_envs=8 \(seed 0's 4\)$"):
        together_checks.check_configs([config, other])
    # An algorithm's setting by its own name: it read "seed 1's algorithm differ ...".
    other = train_config.replace(config, seed=1, learning_rate=1e-3)
    rate = config.algorithm.learning_rate
    with pytest.raises(ValueError, match=rf"seed 1's learning_rate=0\.001 \(seed 0's {rate}\)$"):
        together_checks.check_configs([config, other])
    with pytest.raises(ValueError, match=r"must differ, got \[0, 0\]"):
        together_checks.check_configs([config, config])


def test_seeds_on_rollout_actors_are_refused_in_one_line():
    settings = ["objective=clipped", "rollout_actors=2"]
    configs = [config_of("cartpole", settings, seed) for seed in (0, 1)]
    with pytest.raises(ValueError, match=r"^seeds train together .*rollout_actors=2: train each"):
        together_checks.check_configs(configs)
    # Met in `train --seeds` too, not only in a sweep.
    with pytest.raises(
        ValueError, match=r"\(train without --seeds, or sweep without --together\)$"
    ):
        together_checks.check_configs(configs)


def test_a_split_placement_is_refused_naming_the_settings_to_change():
    # Stand-ins for two devices: this process has one CPU device.
    acting, learner = (types.SimpleNamespace(platform="cpu", id=i) for i in (0, 1))
    where = placement.Placement(acting=acting, learner=learner)
    config = config_of("pendulum_jax", ["acting_device=cpu:0", "device=cpu:1"], 0)
    with pytest.raises(ValueError) as raised:
        together_checks.check_placement(where, config)
    assert str(raised.value) == (
        "seeds on a JAX-native env train together only acting and learning on one device, got "
        "acting_device='cpu:0' (acting on cpu:0) and device='cpu:1' (learning on cpu:1): "
        "set acting_device=auto to act where they learn, or device=cpu:0 to learn where they act"
    )


def test_atari_is_refused_in_one_line():
    config = config_of("pong", [], 0)
    with pytest.raises(ValueError, match=r"^backend='ale' builds no batch of several runs' envs$"):
        environments.build(config, seeds=[0, 1])


# Host envs: each seed's four envs are a quarter of one batch of worker processes or of
# the MuJoCo batch. Pendulum's and HalfCheetah's episodes all run to the time limit.
# HalfCheetah's contacts grow float error fast: episodes of 20 steps keep it small.
CHEETAH = ["backend=mujoco", "num_envs=4", "steps=640", "steps_per_update=40", "phase_steps=160"]
CHEETAH += ["num_minibatches=2", "update_epochs=2", "eval_every=1", "max_length=20"]
CHEETAH += ["final_episodes=4", "policy_layers=16", "value_layers=16"]
HOST = [("pendulum", PENALTY, 1e-6), ("cheetah_clipped", CHEETAH, 1e-4)]


@pytest.mark.slow
@pytest.mark.parametrize("preset, settings, tolerance", HOST, ids=["workers", "mujoco"])
def test_on_host_envs_each_seed_trains_as_its_solo_run(preset, settings, tolerance):
    assert_each_seed_trains_as_its_solo_run(preset, settings, (0, 3), tolerance, 1e-6)


@pytest.mark.slow
def test_every_script_reads_a_together_sweeps_folders(tmp_path, capsys):
    logdir = tmp_path / "sweep"
    argv = ["--logdir", str(logdir), "--configs", "pendulum_jax", "--seeds", "0", "1"]
    argv += [item for assignment in PENALTY for item in ("--set", assignment)]
    assert sweep.main([*argv, "--together"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["seed"], line["seeds_together"]) for line in lines] == [(0, 2), (1, 2)]
    assert all(line["finished"] for line in lines)
    assert (logdir / "seeds0_1-pendulum_jax.log").exists()
    assert sweep.main([*argv, "--together"]) == 0  # Finished: skipped, each line again.
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["final_return"] for line in again] == [line["final_return"] for line in lines]
    assert len((logdir / sweep.RESULTS).read_text().splitlines()) == 2
    folders = [logdir / f"seed{seed}-pendulum_jax" for seed in (0, 1)]
    for folder, line in zip(folders, lines, strict=True):
        rows = evaluate.evaluate(folder, 4)
        assert rows and all(np.isfinite(row["return"]) for row in rows)
        assert batchrl.load(folder).act(np.zeros(3, np.float32)).shape == (1,)
        assert (
            line["final_return"]
            == json.loads(folder.joinpath("metrics.jsonl").read_text().splitlines()[-1])[
                "final/return"
            ]
        )
    assert plot.main([*map(str, folders), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert table.main([str(logdir / sweep.RESULTS)]) == 0
    assert "pendulum_jax" in capsys.readouterr().out


def test_batchrl_train_with_seeds_returns_a_run_a_seed(tmp_path):
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    seeds = np.arange(3, 5)  # numpy's ints, as a sweep over seeds makes them.
    runs = batchrl.train("pendulum_jax", steps=400, seeds=seeds, logdir=tmp_path, **settings)
    assert [result.config.seed for result in runs] == [3, 4]
    assert all(type(result.config.seed) is int for result in runs)
    assert [result.rundir.name.split("-")[-2:] for result in runs] == [
        ["seed3", "pendulum_jax"],
        ["seed4", "pendulum_jax"],
    ]
    assert all("final/return" in result.metrics[-1] for result in runs)
    with pytest.raises(ValueError, match="give seed or seeds, not both"):
        batchrl.train("pendulum_jax", seed=1, seeds=[3, 4])
    for seeds, why in (([], "none given"), ([5, 6, 5], r"\[5\] given twice")):
        with pytest.raises(ValueError, match=f"seeds must be one or more distinct seeds.*{why}"):
            batchrl.train("pendulum_jax", seeds=seeds, logdir=tmp_path / "more")
    assert not (tmp_path / "more").exists()  # Refused before any folder.
    argv = ["--logdir", str(tmp_path / "more"), "--config", "pendulum_jax", "--seeds", "1", "1"]
    assert train.main(argv) == 2
    assert not (tmp_path / "more").exists()


def test_a_together_run_of_one_seed_says_seed(capsys):
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    settings.update(policy_layers=(16,), value_layers=(16,))
    batchrl.train("pendulum_jax", steps=400, seeds=[3], **settings)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("1 seed together, in memory; ")
    phases = [line for line in lines if line.startswith("phase ")]
    assert len(phases) == 2 and all(line.endswith("  (mean of 1 seed)") for line in phases)


def test_a_together_runs_config_warnings_are_said_once_not_a_seed_each(tmp_path, caplog):
    # Six seeds printed "env_kind=jax is deprecated: ..." six times; an env object given was
    # checked once a seed too.
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4, steps=200)
    settings.update(policy_layers=(16,), value_layers=(16,), env_kind="jax")
    batchrl.train("pendulum_jax", seeds=[0, 1, 2], **settings)
    said = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert said == ["env_kind=jax is deprecated: set backend=jax instead"]
    caplog.clear()
    argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "0", "1", "2"]
    argv += ["--set", "env_kind=jax", "steps=200", "num_envs=4", "update_every=4"]
    argv += ["max_length=50", "final_episodes=4", "policy_layers=16", "value_layers=16"]
    assert train.main(argv) == 0
    said = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert said == ["env_kind=jax is deprecated: set backend=jax instead"]


def test_seeds_with_set_seed_are_refused_in_one_line(tmp_path, capsys):
    argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
    assert train.main([*argv, "--set", "seed=5"]) == 2
    assert capsys.readouterr().err == (
        "batchrl: error: --set seed=5 would give every run one seed: choose them with --seeds\n"
    )
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    # A KeyError's traceback; then `a{seed` and `{bad}` trained into folders named so.
    for stamp in ("a{seed}{x}", "a{seed", "{bad}"):
        assert train.main([*argv, "--timestamp", stamp]) == 2
        assert capsys.readouterr().err == (
            f"batchrl: error: --timestamp {stamp!r}: a together-run's timestamp may hold "
            "{seed}, and no other braces\n"
        )
    # One seed's folder named as the together-run's trained new `K-seed1-seed1-...` runs.
    assert train.main([*argv, "--timestamp", "K-seed1"]) == 2
    assert capsys.readouterr().err == (
        "batchrl: error: --timestamp 'K-seed1' names seed 1's folder of together-run 'K': "
        "resume the run with --timestamp K and its --seeds, or seed 1 alone with --seed 1\n"
    )
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    # Seed 2 of other settings refused: seed 1's new folder, holding only its config, was left
    # behind, and the corrected command then refused seed 1 as started with other settings.
    config = configs.parse_override(configs.get("pendulum_jax"), "seed=2")
    run_folder.create(tmp_path, config, "pendulum_jax", "a-seed2")
    assert train.main([*argv, "--timestamp", "a", "--set", "eval_every=3"]) == 2
    assert "was started with other settings: eval_every=3" in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["a-seed2-pendulum_jax"]


def test_refused_seeds_leave_no_folder_and_same_second_runs_take_the_next_stamp(
    tmp_path, monkeypatch
):
    clipped = dict(objective="clipped", num_minibatches=2)
    for preset, settings, why in (
        ("pong", {}, r"backend='ale' \(Atari's batch\) seeds all its games from one seed"),
        ("cartpole", dict(clipped, rollout_actors=2), "got rollout_actors=2"),
    ):
        with pytest.raises(ValueError, match=rf"^seeds train together .*{why}.*on its own"):
            batchrl.train(preset, seeds=[0, 1], logdir=tmp_path / "refused", **settings)
        assert (
            train.main(
                [
                    "--logdir",
                    str(tmp_path / "refused"),
                    "--config",
                    preset,
                    "--seeds",
                    "0",
                    "1",
                    *(f"--set={k}={v}" for k, v in settings.items()),
                ]
            )
            == 1
        )
    assert not (tmp_path / "refused").exists()
    monkeypatch.setattr(run_folder, "TIMESTAMP_FORMAT", "T")  # Every run in the same second.
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4, steps=200)
    for _ in range(2):
        batchrl.train("pendulum_jax", seeds=[3, 4], logdir=tmp_path, **settings)
    assert sorted(path.name for path in tmp_path.glob("T*")) == [
        "T-seed3-pendulum_jax",
        "T-seed4-pendulum_jax",
        "T.1-seed3-pendulum_jax",
        "T.1-seed4-pendulum_jax",
    ]


# Clipped CartPole-sized runs on the mock host envs of 20-step episodes.
TINY_HOST = dict(objective="clipped", num_minibatches=2, steps_per_update=20, max_length=20)
TINY_HOST |= dict(policy_layers=(8,), value_layers=(8,))


@pytest.mark.slow
def test_host_seeds_rows_count_worker_restarts(tmp_path):
    failing = {"where": "step", "how": "exit", "at": 150, "duration": 20, "discrete": True}
    settings = dict(TINY_HOST, num_envs=4, phase_steps=400)
    runs = batchrl.train(
        "cartpole",
        env="batchrl.testing.mock:FailingEnv",
        env_kwargs=failing,
        steps=800,
        seeds=[0, 1],
        restart_workers=True,
        eval_episodes=4,  # The last phase evaluates on both: 30 ran the new workers to 150.
        final_episodes=4,
        **settings,
    )
    for result in runs:  # The workers of both seeds die in phase 2 and are replaced.
        assert [row["perf/worker_restarts"] for row in result.metrics] == [0.0, 2.0]


def test_a_non_finite_seed_is_named():
    configs_ = [config_of("pendulum_jax", PENALTY, seed) for seed in (4, 7)]
    env, _ = environments.build(configs_[0])
    group, states = together.build(configs_, env)
    learners = together.stack([state.agent.learner for state in states])
    broken = jax.tree.map(lambda leaf: leaf.at[1].set(np.nan), learners.params)
    values = jax.device_get(group.metrics(together.stack(states).train, learners))
    rows = [{name: float(value[seed]) for name, value in values.items()} for seed in range(2)]
    diverged_seeds.check_finite(group, learners, rows, 200, [4, 7])  # All finite: no error.
    with pytest.raises(FloatingPointError, match=r"^seed 7: parameters \(nan\) became non-finite"):
        diverged_seeds.check_finite(group, learners.replace(params=broken), rows, 200, [4, 7])
    # Both at once, in one error: the second was found only by training the rest again.
    both = jax.tree.map(lambda leaf: leaf.at[:].set(np.nan), learners.params)
    with pytest.raises(diverged_seeds.DivergedError) as error:
        diverged_seeds.check_finite(group, learners.replace(params=both), rows, 200, [4, 7])
    assert error.value.seeds == [4, 7] and str(error.value).count("became non-finite") == 2
    assert diverged_seeds.named([4, 7, 9]) == "seeds 4, 7 and 9"


@pytest.mark.slow
def test_a_diverged_seed_leaves_the_others_to_train_to_their_budget(tmp_path):
    # Seed 100's first env rewards NaN from its 30th step (phase 2); seed 0's never do.
    first = seeds_lib.env_seeds(100, 2)[0]  # Its Gymnasium seed.
    poison = {"seed": first, "at": 30, "duration": 20, "discrete": True}
    settings = dict(TINY_HOST, num_envs=2, phase_steps=40, eval_every=100, final_episodes=2)
    said = r"^seed 100: .* became non-finite by env step 80; .*; seed 0 trained on without it$"
    with pytest.raises(FloatingPointError, match=said):
        batchrl.train(
            "cartpole",
            env="batchrl.testing.mock:NaNRewardEnv",
            env_kwargs=poison,
            steps=160,
            seeds=[0, 100],
            logdir=tmp_path,
            **settings,
        )
    rows = {
        folder.name.split("-")[1]: metrics_log.read_jsonl(folder / "metrics.jsonl")
        for folder in tmp_path.iterdir()
    }
    assert [row["step"] for row in rows["seed0"]] == [40, 80, 120, 160]  # Its budget.
    assert [row["step"] for row in rows["seed100"]] == [40]  # Its last finite phase.
    assert results.read(next(tmp_path.glob("*seed0*"))).finished


@pytest.mark.slow
def test_updates_side_by_side_train_as_one_by_one():
    # An accelerator maps the seeds' updates side by side; the CPU runs them in turn.
    seeds = [config_of("pendulum_jax", PENALTY, seed) for seed in (1, 2)]
    env, _ = environments.build(seeds[0])
    group, states = together.build(seeds, env)
    side_by_side = together.make(group.solo, env, len(seeds), one_by_one=False)
    stacked = group.stack(states)
    reset = jax.numpy.asarray(False)
    ours = side_by_side.train(stacked.train, stacked.agent, reset)
    theirs = group.train(stacked.train, stacked.agent, reset)
    assert int(ours[1].learner.updates.min()) >= 1  # The phase trained each seed.
    for a, b in zip(
        jax.tree.leaves(ours[1].learner.params),
        jax.tree.leaves(theirs[1].learner.params),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


_SPLIT_SCRIPT = """
from batchrl.training import together_run, together_test

preset, seeds = "cheetah_clipped", (0, 3)
settings = [*together_test.CHEETAH, "device=cpu:1", "acting_device=cpu:0"]
together_test.assert_each_seed_trains_as_its_solo_run(preset, settings, seeds, 1e-4, 1e-6)
configs = [together_test.config_of(preset, settings, seed) for seed in seeds]
print("WHERE", together_run.train([None, None], configs)[0].programs.where.describe())
"""


@pytest.mark.slow
def test_seeds_on_host_envs_act_on_one_device_and_learn_on_another_as_their_solo_runs(tmp_path):
    # Two CPU devices stand in for a CPU and an accelerator (`placement_test`); each
    # seed's solo run is split the same way, and equals its run on one device there.
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}
    script = tmp_path / "split_together.py"
    script.write_text(_SPLIT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("WHERE ")]
    assert line == "WHERE acting on cpu:0, learning on cpu:1"


def test_an_env_error_names_the_seed_whose_envs_failed():
    # Seeds 3, 5 and 8 of 4 envs each: one batch of 12, seed 5's envs are 4-7 in it.
    seeds = [3, 5, 8]
    raised = errors.raised(
        "ValueError: bad (raised by env 'E' (envs 6-9, worker pid 12) during step)\nTraceback",
        "E",
        "step",
        "ValueError",
        "Traceback",
        ValueError,
    )
    named = together_host.seed_named(raised, seeds, 4)
    assert isinstance(named, errors.EnvRaisedError) and isinstance(named, ValueError)
    assert str(named).splitlines()[0] == (
        "ValueError: bad (raised by env 'E' (envs 6-9: seed 5's envs 2-3 and seed 8's envs "
        "0-1, worker pid 12) during step)"
    )
    assert named.remote_traceback == "Traceback"
    crashed = errors.EnvCrashedError("env E (env 4, worker pid 7) died during step", "E")
    assert str(together_host.seed_named(crashed, seeds, 4)) == (
        "env E (env 4: seed 5's env 0, worker pid 7) died during step"
    )
    unnamed = errors.EnvError("the batch is closed")
    assert together_host.seed_named(unnamed, seeds, 4) is unnamed


@pytest.mark.slow
def test_the_train_commands_line_for_a_together_runs_env_error_names_its_seed(tmp_path, capsys):
    failing = '{"where": "step", "how": "raise", "at": 30, "discrete": true}'
    argv = ["--config", "cartpole", "--logdir", str(tmp_path), "--seeds", "3", "5"]
    argv += ["--set", "env=batchrl.testing.mock:FailingEnv", f"env_kwargs={failing}"]
    settings = [*CLIPPED, "num_envs=2", "envs_per_worker=1"]
    argv += [item for assignment in settings for item in ("--set", assignment)]
    assert train.main(argv) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # Each seed's 2 envs are 2 workers of 1 env; whichever failed first is named.
    assert re.search(r"\(env ([0-3]): seed ([35])'s env ([01]), worker pid \d+\)", line), line
    first, seed, own = re.search(r"\(env (\d): seed (\d)'s env (\d)", line).groups()
    assert (int(seed), int(own)) == ((3, 5)[int(first) // 2], int(first) % 2)


@pytest.mark.slow  # Three runs: tens of seconds.
def test_seeds_added_to_finished_ones_train_alone(tmp_path, capsys):
    settings = [item for assignment in PENALTY for item in ("--set", assignment)]
    argv = ["--config", "pendulum_jax", "--timestamp", "T", *settings]
    assert train.main(["--logdir", str(tmp_path / "a"), "--seeds", "0", "1", *argv]) == 0
    finished = {seed: (tmp_path / "a" / f"T-seed{seed}-pendulum_jax") for seed in (0, 1)}
    kept = {seed: run_folder.metrics(rundir).read_bytes() for seed, rundir in finished.items()}
    capsys.readouterr()
    assert train.main(["--logdir", str(tmp_path / "a"), "--seeds", "0", "1", "2", *argv]) == 0
    out = capsys.readouterr().out
    for seed, rundir in finished.items():  # Left as they were, not trained again.
        assert f"run folder {rundir} has trained all its 4 phases" in out
        assert run_folder.metrics(rundir).read_bytes() == kept[seed]
    added = tmp_path / "a" / "T-seed2-pendulum_jax"
    assert f"1 seed together, run folder {added}; " in out
    assert train.main(["--logdir", str(tmp_path / "b"), "--seeds", "2", *argv]) == 0
    alone = tmp_path / "b" / "T-seed2-pendulum_jax"
    assert learned(added) == learned(alone)


def learned(rundir):
    """A run's metric rows without its timings (seconds, steps/s)."""
    rows = [json.loads(line) for line in run_folder.metrics(rundir).read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


@pytest.mark.slow
def test_batchrl_resume_given_a_together_runs_folders_trains_them_on_together(tmp_path, capsys):
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4, eval_every=1)
    settings |= dict(policy_layers=(16, 16), value_layers=(16, 16))
    first = batchrl.train(
        "pendulum_jax", steps=400, seeds=[0, 1], logdir=tmp_path / "a", **settings
    )
    capsys.readouterr()
    resumed = batchrl.resume([run.rundir for run in first], steps=800)
    assert capsys.readouterr().out.startswith("2 seeds together, run folders ")
    whole = batchrl.train(
        "pendulum_jax", steps=800, seeds=[0, 1], logdir=tmp_path / "b", **settings
    )
    for one, other in zip(resumed, whole, strict=True):
        assert len(one.metrics) == 4  # Every phase the folder holds.
        # But for the evaluation that ended the first call's budget at phase 2.
        mine, theirs = learned(one.rundir), learned(other.rundir)
        assert [mine[0], *mine[2:]] == [theirs[0], *theirs[2:]]
    with pytest.raises(ValueError, match=r"^callback is a solo run's"):
        batchrl.resume([run.rundir for run in first], callback=print)


def test_the_seeds_warnings_are_said_once_when_their_folders_are_named(tmp_path, caplog):
    # Each seed's run started on its own under --timestamp (a sweep's --together): the
    # env's step limit was said once a seed.
    settings = [item for assignment in PENALTY for item in ("--set", assignment)]
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2", "3"]
    caplog.set_level("WARNING", logger="batchrl")
    assert train.main([*args, "--timestamp", "s{seed}", *settings, "--set", "steps=200"]) == 0
    said = [record.getMessage() for record in caplog.records]
    limit = "env 'Pendulum-v1' has its own limit of 200 steps, above max_length=50"
    assert len([line for line in said if line.startswith(limit)]) == 1, said

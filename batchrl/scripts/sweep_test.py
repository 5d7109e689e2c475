"""Tests for the sweep: one JSON line a run, finished runs skipped, interrupted runs resumed."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings

import jax
import psutil
import pytest

from batchrl.bridge import seeds as seeds_lib
from batchrl.configs import presets
from batchrl.scripts import evaluate, stats, sweep, train_test
from batchrl.training import checkpoint, metrics_log, results, run_folder

# The train tests' tiny pendulum runs, evaluated every second phase.
TINY = [*train_test.TINY, "--set", "eval_every=2"]


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def run_sweep(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "batchrl.scripts.sweep", *argv]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


# One test process runs this module (`--dist loadgroup`), so its sweep is made once.
pytestmark = pytest.mark.xdist_group("sweep_test")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep's folder, its command line, its lines, and what it left in its TMPDIR.

    Without the test session's compilation cache, as a user's sweep runs: its runs share
    one of the sweep's own (JAX logs each program read from it).
    """
    logdir = tmp_path_factory.mktemp("sweep")
    temporary = tmp_path_factory.mktemp("sweep_tmpdir")
    argv = ["--logdir", str(logdir), "--configs", "pendulum_jax", "--seeds", "0", "1"]
    argv += ["--steps", "1000", *TINY]
    env = {name: value for name, value in os.environ.items() if name != sweep.CACHE_VARIABLE}
    env.update(TMPDIR=str(temporary), JAX_LOG_COMPILES="1")
    done = run_sweep(argv, env)
    return logdir, argv, lines(done.stdout), (done.stderr, list(temporary.iterdir()))


@pytest.mark.slow
def test_a_run_folder_given_as_a_config_names_the_sweeps_runs_as_it_is_named(tmp_path):
    # As the train command takes it: the runs of 20261201T120000-pendulum_jax's settings.
    source = tmp_path / "20261201T120000-pendulum_jax"
    source.mkdir()
    run_folder.write_config(source, presets.get("pendulum_jax"))
    given = str(source / "config.yaml")
    argv = ["--logdir", str(tmp_path / "sweep"), "--configs", given, "--seeds", "3", "4"]
    args = sweep.parse_args([*argv, "--set", "steps=100"])
    sweep.check_runs(args, given)  # A traceback on its folder's name before.
    assert sweep.rundir_of(args, given, 3) == tmp_path / "sweep" / "seed3-pendulum_jax"
    assert sweep.log_of(args, given, [3, 4]).name == "seeds3_4-pendulum_jax.log"
    assert sweep.main([*argv[:3], str(tmp_path / "none.yaml"), *argv[4:]]) == 2


def test_each_run_is_a_run_folder_and_a_json_line(swept):
    logdir, _, rows, _ = swept
    assert [(row["config"], row["seed"]) for row in rows] == [
        ("pendulum_jax", 0),
        ("pendulum_jax", 1),
    ]
    for row in rows:
        assert row["finished"] and row["env_steps"] == 1000 and row["final_episodes"] == 12
        assert row["final_return"] == row["eval_curve"][-1][1]
        assert [point[0] for point in row["eval_curve"]] == [400, 800, 1000]
        walls = [point[2] for point in row["eval_curve"]]
        assert walls == sorted(walls) and row["wall_seconds"] >= walls[-1] > 0
        assert row["machine"]["cores"] >= 1 and row["machine"]["versions"]["jax"]
        # What made the line: the run's every setting and the code's commit.
        assert row["settings"]["seed"] == row["seed"] and row["settings"]["steps"] == 1000
        assert row["settings"]["algorithm"]["update_every"] == 4
        in_git = (pathlib.Path(sweep.__file__).parents[2] / ".git").exists()
        assert bool(re.fullmatch(r"[0-9a-f]{40}(-dirty)?", row["commit"] or "")) == in_git
    assert (logdir / "seed0-pendulum_jax" / "config.yaml").is_file()
    assert len(lines((logdir / sweep.RESULTS).read_text())) == 2
    # Different seeds learn differently.
    assert rows[0]["eval_curve"] != rows[1]["eval_curve"]


@pytest.mark.slow
def test_later_runs_read_the_programs_the_first_compiled_and_none_is_left(swept):
    *_, (stderr, left) = swept
    # Seed 1's train and eval phases: the same programs as seed 0's, a seed being data.
    assert stderr.count("Persistent compilation cache hit for 'jit_run'") >= 2, stderr[-3000:]
    assert left == []  # The sweep's cache went with it.


@pytest.mark.slow
def test_a_finished_run_is_skipped_not_trained_again(swept, capsys):
    logdir, argv, rows, _ = swept
    before = (logdir / "seed0-pendulum_jax" / "metrics.jsonl").read_text()
    assert sweep.main(argv) == 0
    again = lines(capsys.readouterr().out)
    assert [row["seconds_this_invocation"] for row in again] == [None, None]
    assert [row["final_return"] for row in again] == [row["final_return"] for row in rows]
    assert (logdir / "seed0-pendulum_jax" / "metrics.jsonl").read_text() == before
    assert len(lines((logdir / sweep.RESULTS).read_text())) == 2  # One line a run, still.


@pytest.mark.slow
def test_a_finished_run_without_its_line_gets_it_when_the_sweep_runs_again(swept, tmp_path, capsys):
    # As a sweep stopped in a run's last phase leaves it: finished, its line not written.
    logdir, argv, rows, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    results_file = tmp_path / "sweep" / sweep.RESULTS
    results_file.write_text(results_file.read_text().splitlines()[0] + "\n")  # Seed 1's lost.
    argv = [*argv[:1], str(tmp_path / "sweep"), *argv[2:]]
    assert sweep.main(argv) == 0
    capsys.readouterr()
    written = lines(results_file.read_text())
    assert [row["seed"] for row in written] == [0, 1]
    assert written[1]["final_return"] == rows[1]["final_return"]
    assert written[1]["seconds_this_invocation"] is None  # Trained by the earlier sweep.


@pytest.mark.slow
def test_a_run_whose_last_checkpoint_was_not_written_trains_its_last_phase_again(
    swept, tmp_path, capsys
):
    # As a full disk leaves it: the final phase's row written, its checkpoint not, and the
    # failed run's line not written. Skipped as finished, its final policy was lost.
    logdir, argv, rows, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    rundir = tmp_path / "sweep" / "seed1-pendulum_jax"
    (rundir / "checkpoints" / "ckpt-000000000005.bin").unlink()
    assert results.read(rundir).finished and not results.checkpointed(rundir)
    results_file = tmp_path / "sweep" / sweep.RESULTS
    results_file.write_text(results_file.read_text().splitlines()[0] + "\n")
    assert sweep.main([*argv[:1], str(tmp_path / "sweep"), *argv[2:]]) == 0
    again = lines(capsys.readouterr().out)
    assert [row["seconds_this_invocation"] is None for row in again] == [True, False]
    assert checkpoint.steps(rundir / "checkpoints")[-1] == 5 and results.checkpointed(rundir)
    assert again[1]["final_return"] == rows[1]["final_return"]  # Resumed exactly.
    assert [row["seed"] for row in lines(results_file.read_text())] == [0, 1]


def test_a_log_it_cannot_write_is_one_line_before_any_run(tmp_path, capsys):
    (tmp_path / "seed0-pendulum_jax.log").mkdir()  # As a read-only or full disk refuses it.
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--seeds", "0"]
    assert sweep.main([*argv, "--steps", "1000", *TINY]) == 1
    assert capsys.readouterr().err == (
        f"sweep: error: cannot write '{tmp_path / 'seed0-pendulum_jax.log'}': Is a directory; "
        "a folder stands at its path\n"
    )
    assert not (tmp_path / "seed0-pendulum_jax").exists()


@pytest.mark.slow
def test_a_results_file_cut_mid_line_is_read_whole_after_the_next_sweep(swept, tmp_path, capsys):
    # As a sweep killed while writing seed 1's line leaves its results file.
    logdir, argv, rows, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    results_file = tmp_path / "sweep" / sweep.RESULTS
    first, second = results_file.read_text().splitlines()
    results_file.write_text(first + "\n" + second[: len(second) // 2])
    argv = [*argv[:1], str(tmp_path / "sweep"), *argv[2:]]
    for _ in range(2):  # The second sweep reads what the first wrote.
        assert sweep.main(argv) == 0
    capsys.readouterr()
    written = lines(results_file.read_text())
    assert [row["seed"] for row in written] == [0, 1]
    assert written[1]["final_return"] == rows[1]["final_return"]
    assert stats.read([results_file])["pendulum_jax"] == {
        0: rows[0]["final_return"],
        1: rows[1]["final_return"],
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "seed=5"], "--set seed=... would give every run one seed"),
        (["--set", "num_envs=4", "seed=5"], "--set seed=... would give every run one seed"),
        (["--steps", "10", "--set", "steps=20"], "--steps and --set steps=... both set"),
        (["--evaluate-best", "0"], "--evaluate-best takes episodes, at least 1: got 0"),
        (["--seeds", "0", "1", "0"], "--seeds must be distinct seeds (a folder each), got [0]"),
        (["pendulum_jax"], "--configs must be distinct configs (a run each), got ['pendulum_jax']"),
    ],
)
def test_settings_the_sweep_cannot_honour_are_refused_before_any_run(
    tmp_path, capsys, extra, message
):
    argv = ["--logdir", str(tmp_path / "sweep"), "--configs", "pendulum_jax", *extra]
    with pytest.raises(SystemExit) as exited:
        sweep.main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        sweep.main(["--logdir", str(tmp_path / "file"), "--configs", "pendulum_jax"])
    assert "is a file, not a folder of runs" in capsys.readouterr().err
    (tmp_path / "run").mkdir()  # A run's folder: the sweep's lines and logs went in there.
    (tmp_path / "run" / "config.yaml").write_text("")
    with pytest.raises(SystemExit):
        sweep.main(["--logdir", str(tmp_path / "run"), "--configs", "pendulum_jax"])
    assert "is a run's folder: give the folder of its runs" in capsys.readouterr().err
    # Two files of one name would train one folder a seed, the second refused after the first.
    for folder, rate in (("a", 1e-3), ("b", 1e-4)):
        (tmp_path / folder).mkdir()
        text = f"env: Pendulum-v1\nalgorithm:\n  learning_rate: {rate}\n"
        (tmp_path / folder / "pend.yaml").write_text(text)
    files = [str(tmp_path / "a" / "pend.yaml"), str(tmp_path / "b" / "pend.yaml")]
    with pytest.raises(SystemExit):
        sweep.main(["--logdir", str(tmp_path / "sweep"), "--configs", *files, "--seeds", "3"])
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            f"error: --configs {files[0]} and {files[1]} both name their runs 'pend' (seed3-pend): "
            "give each config file its own name"
        )
    )
    assert not (tmp_path / "sweep").exists()
    # A misspelt config is found before the configs before it train.
    argv = ["--logdir", str(tmp_path / "sweep"), "--configs", "pendulum_jax", "pendulm_jax"]
    assert sweep.main(argv) == 2
    assert "unknown config 'pendulm_jax'" in capsys.readouterr().err
    # So are a bad seed after the first, and seeds of a config that cannot train together.
    tiny = ["--steps", "200"]  # One phase, should the first run train.
    for extra, message in (
        (["pendulum_jax", "--seeds", "0", "-1"], "seed must be in [0, 2**31), got -1\n"),
        (
            ["pendulum_jax", "pong", "--seeds", "0", "1", "--together"],
            "backend='ale' (Atari's batch) seeds all its games from one seed",
        ),
    ):
        argv = ["--logdir", str(tmp_path / "sweep"), "--configs", *extra, *tiny]
        assert sweep.main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


def test_a_hundred_seeds_together_log_to_a_file_named_by_the_first_and_last(tmp_path):
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--together"]
    argv += ["--seeds", *map(str, range(100)), "--set", "num_envs=100000000"]
    assert sweep.main(argv) == 1  # The train command refuses a storage too large for memory.
    assert [path.name for path in tmp_path.iterdir()] == ["seeds0_..._99-pendulum_jax.log"]


def test_a_sweep_with_jax_running_starts_its_runs_without_a_fork_jax_warns_of(tmp_path, recwarn):
    # After --evaluate-best had run JAX in the sweep, each later run was started with a
    # preexec_fn (fork, Python code, exec), and JAX warned "os.fork() was called".
    jax.numpy.zeros(1).block_until_ready()  # JAX's threads run, as after an evaluation.
    warnings.simplefilter("always")
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--seeds", "0"]
    assert sweep.main([*argv, "--steps", "200", *TINY]) == 0
    assert [str(w.message) for w in recwarn if "os.fork()" in str(w.message)] == []


@pytest.mark.slow
def test_evaluate_best_adds_the_kept_best_policy_on_more_episodes(swept, tmp_path, capsys):
    logdir, argv, rows, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")  # Its lines gain the kept bests' returns.
    logdir, argv = tmp_path / "sweep", [*argv[:1], str(tmp_path / "sweep"), *argv[2:]]
    assert sweep.main([*argv, "--evaluate-best", "8"]) == 0
    again = lines(capsys.readouterr().out)
    for seed, row in enumerate(again):
        best = logdir / f"seed{seed}-pendulum_jax" / "checkpoints" / checkpoint.BEST
        assert row["kept_best_phase"] == checkpoint.step_of(best)
        assert row["kept_best_episodes"] >= 8 and row["kept_best_return"] < 0  # Pendulum's.
        assert row["final_return"] == rows[seed]["final_return"]


@pytest.mark.slow
def test_finished_runs_evaluated_again_get_lines_with_their_kept_best(swept, tmp_path, capsys):
    # The sweep run first without --evaluate-best, then with it: stats reads the file.
    logdir, argv, _, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    argv = [*argv[:1], str(tmp_path / "sweep"), *argv[2:], "--evaluate-best", "4"]
    assert sweep.main(argv) == 0
    printed = lines(capsys.readouterr().out)
    results_file = tmp_path / "sweep" / sweep.RESULTS
    assert stats.main([str(results_file), "--score", "kept", "--reps", "20"]) == 0
    summary = json.loads(capsys.readouterr().out)["configs"]["pendulum_jax"]
    assert summary["scores"] == [round(row["kept_best_return"], 2) for row in printed]
    written = results_file.read_text()
    assert sweep.main(argv) == 0  # Evaluated again alike: nothing more to write.
    capsys.readouterr()
    assert results_file.read_text() == written


@pytest.mark.slow
def test_a_run_that_evaluates_sampled_actions_says_so_and_scores_its_best_so(
    swept, tmp_path, capsys
):
    logdir, _, rows, _ = swept
    assert not any("sampled" in row for row in rows)  # The mean action's.
    # The same finished run, its config set to evaluate sampled actions.
    shutil.copytree(logdir / "seed0-pendulum_jax", tmp_path / "seed0-pendulum_jax")
    config = run_folder.read_config(tmp_path / "seed0-pendulum_jax")
    run_folder.write_config(
        tmp_path / "seed0-pendulum_jax", dataclasses.replace(config, eval_sample=True)
    )
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--steps", "1000", *TINY]
    assert sweep.main([*argv, "--set", "eval_sample=true", "--evaluate-best", "8"]) == 0
    (row,) = lines(capsys.readouterr().out)
    assert row["sampled"] is True and row["settings"]["eval_sample"] is True
    rundir = logdir / "seed0-pendulum_jax"
    (sampled,) = evaluate.evaluate(rundir, 8, best=True, sample=True)
    (mean,) = evaluate.evaluate(rundir, 8, best=True, sample=False)
    assert row["kept_best_return"] == sampled["return"] != mean["return"]


@pytest.mark.slow
def test_finished_runs_asked_for_a_raised_budget_train_on_to_it(swept, tmp_path, capsys):
    # They were skipped as finished, their lines those of the old budget, and it exited 0.
    logdir, argv, rows, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    argv = [*argv[:1], str(tmp_path / "sweep"), *argv[2:]]
    budget = argv.index("--steps") + 1
    argv[budget] = str(int(argv[budget]) + 400)
    assert sweep.main(argv) == 0
    again = lines(capsys.readouterr().out)
    assert [row["env_steps"] for row in again] == [row["env_steps"] + 400 for row in rows]
    assert all(row["seconds_this_invocation"] is not None for row in again)


@pytest.mark.slow
def test_a_finished_run_asked_for_with_other_settings_is_refused(swept, capsys):
    _, argv, _, _ = swept
    assert sweep.main([*argv, "--set", "learning_rate=0.001"]) == 2
    err = capsys.readouterr().err
    assert "learning_rate=0.001 (saved 0.0001)" in err and len(err.strip().splitlines()) == 1


def test_a_new_seed_with_other_settings_beside_the_runs_is_refused_before_it_trains(swept, capsys):
    # Trained in, it made the logdir's runs two variants, which `plot --seeds` refused.
    logdir, argv, _, _ = swept
    seeds = argv.index("--seeds")
    new = [*argv[: seeds + 1], "7", *argv[seeds + 3 :], "--set", "learning_rate=0.001"]
    assert sweep.main(new) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweep: error: run 'seed0-pendulum_jax' was started with other ")
    assert "learning_rate=0.001 (saved 0.0001)" in err and len(err.strip().splitlines()) == 1
    assert not (logdir / "seed7-pendulum_jax").exists()


@pytest.mark.slow
def test_a_run_another_process_trains_is_left_to_it_and_the_sweep_goes_on(swept, tmp_path, capsys):
    # Seed 0 as a second sweep finds it: unfinished, and trained by the first.
    logdir, argv, _, _ = swept
    shutil.copytree(logdir, tmp_path / "sweep")
    rundir = tmp_path / "sweep" / "seed0-pendulum_jax"
    metrics = run_folder.metrics(rundir)
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))
    argv = [*argv[:1], str(tmp_path / "sweep"), *argv[2:]]
    with run_folder.held(rundir):
        # Not 0: `sweep && table` would make a table without seed 0.
        assert sweep.main(argv) == sweep.SKIPPED == 75
    out, err = capsys.readouterr()
    assert [row["seed"] for row in lines(out)] == [1]  # Seed 1's line, not seed 0's.
    assert err == (
        f"sweep: {rundir} is being trained by another process: skipped; "
        "run the sweep again once that ends for its line\n"
        "sweep: 1 run left to another process, without a line: run the sweep again once "
        "it ends (exit status 75)\n"
    )
    assert not results.read(rundir).finished


# What a shell does to `sweep ... &` before exec: SIGINT ignored, inherited by children.
_AS_BACKGROUND_JOB = ["sh", "-c", 'trap "" INT; exec "$0" "$@"']


@pytest.mark.slow
def test_a_second_ctrl_c_waits_for_the_run_it_stops(tmp_path):
    # Phases of 2-3 s: the first Ctrl-C lets the run end its phase, the second stops it
    # at once; the sweep returns only once its run has saved its checkpoint and exited
    # (it returned with its run still in its phase, when that ended after the second).

    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--seeds", "3"]
    argv += ["--steps", "400000", *TINY, "--set", "phase_steps=40000"]
    process = subprocess.Popen(
        [sys.executable, "-m", "batchrl.scripts.sweep", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rundir = tmp_path / "seed3-pendulum_jax"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not checkpoint.steps(rundir / "checkpoints"):
        time.sleep(0.02)
    (run,) = psutil.Process(process.pid).children()
    process.send_signal(signal.SIGINT)
    time.sleep(1)  # Past `Popen.wait`'s own 0.25 s for a child to end at a Ctrl-C.
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)  # Not `communicate`: the run holds the sweep's stderr too.
    returned = time.time()
    assert not psutil.pid_exists(run.pid)
    saved = max(path.stat().st_mtime for path in (rundir / "checkpoints").iterdir())
    assert saved <= returned  # The run's last checkpoint came before the sweep returned.
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    log = (tmp_path / "seed3-pendulum_jax.log").read_text()
    assert "interrupted: saved a checkpoint" in log
    # Named as the user's Ctrl-C, not as the SIGTERM a sweep once passed on for it.
    assert "batchrl: SIGINT: stopping after this phase" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("start", "stop"),
    [([], signal.SIGINT), (_AS_BACKGROUND_JOB, signal.SIGTERM), ([], signal.SIGKILL)],
    ids=["ctrl-c", "kill-a-background-sweep", "sigkill-the-sweep"],
)
def test_an_interrupted_sweep_resumes_its_run_where_it_stopped(tmp_path, start, stop):
    # A killed sweep's run gets SIGTERM from the kernel, and saves its phase as on Ctrl-C.
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--seeds", "3"]
    argv += ["--steps", "8000", *TINY]  # 40 phases: the signal comes after the second.
    process = subprocess.Popen(
        [*start, sys.executable, "-m", "batchrl.scripts.sweep", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rundir = tmp_path / "seed3-pendulum_jax"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(checkpoint.steps(rundir / "checkpoints")) < 2:
        time.sleep(0.02)
    process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    assert process.returncode == (-stop if stop == signal.SIGKILL else 130), err[-2000:]
    assert out == ""  # No line for a run that did not finish.
    while run_folder.busy(rundir) and time.monotonic() < deadline + 60:
        time.sleep(0.02)  # The killed sweep's run ends on its own.
    stopped = results.phases(metrics_log.read_jsonl(rundir / "metrics.jsonl"))
    assert 2 <= len(stopped) < 40 and not results.read(rundir).finished
    if stop == signal.SIGKILL:
        return  # Stopped as by SIGTERM, whose run the other cases resume.
    result = run_sweep(argv)
    (row,) = lines(result.stdout)
    assert row["finished"] and row["env_steps"] == 8000
    assert "resumed seed3-pendulum_jax" in (tmp_path / "seed3-pendulum_jax.log").read_text() + (
        result.stderr
    )
    assert [
        r["step"] for r in results.phases(metrics_log.read_jsonl(rundir / "metrics.jsonl"))
    ] == [200 * n for n in range(1, 41)]


@pytest.mark.slow
def test_a_run_killed_by_a_signal_is_named_so_and_the_sweep_exits_as_a_shell_would(tmp_path):
    # It said "exited with -9" and exited with 247.
    argv = ["--logdir", str(tmp_path), "--configs", "pendulum_jax", "--seeds", "3"]
    argv += ["--steps", "8000", *TINY]
    command = [sys.executable, "-m", "batchrl.scripts.sweep", *argv]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rundir = tmp_path / "seed3-pendulum_jax"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not checkpoint.steps(rundir / "checkpoints"):
        time.sleep(0.02)
    (run,) = psutil.Process(process.pid).children()
    run.kill()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGKILL, err[-2000:]
    assert err.endswith("sweep: error: pendulum_jax seed 3 killed by SIGKILL\n")


@pytest.mark.slow
def test_a_together_sweep_with_a_diverged_seed_writes_the_others_lines_then_fails(tmp_path):
    # Seed 100's first env rewards NaN in phase 2: its seed stops, seed 0 trains on.
    first = seeds_lib.env_seeds(100, 2)[0]
    kwargs = {"seed": first, "at": 30, "duration": 20, "discrete": True}
    argv = ["--logdir", str(tmp_path), "--configs", "cartpole", "--seeds", "0", "100"]
    argv += ["--together", "--steps", "160", "--set", "env=batchrl.testing.mock:NaNRewardEnv"]
    argv += ["--set", f"env_kwargs={json.dumps(kwargs)}", "objective=clipped", "num_envs=2"]
    argv += ["num_minibatches=2", "steps_per_update=20", "phase_steps=40", "policy_layers=8"]
    argv += ["value_layers=8", "max_length=20", "eval_every=100", "final_episodes=2"]
    command = [sys.executable, "-m", "batchrl.scripts.sweep", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "batchrl: error: seed 100: " in done.stderr
    assert done.stderr.endswith("sweep: error: cartpole seed 0 100 exited with 1\n")
    (line,) = lines(done.stdout)  # The seed that finished, in the results file too.
    assert (line["seed"], line["finished"], line["env_steps"]) == (0, True, 160)
    assert metrics_log.read_jsonl(tmp_path / sweep.RESULTS) == [line]
    # A run the failed command raised the budget of is finished, at the old one: no line.
    rundir = tmp_path / "seed0-cartpole"
    assert sweep._to_budget(rundir, results.read(rundir))
    config = run_folder.read_config(rundir)
    run_folder.write_config(rundir, dataclasses.replace(config, steps=320))
    assert not sweep._to_budget(rundir, results.read(rundir))


def test_steps_are_read_as_set_steps_reads_them(capsys):
    # --set steps=1e6 was taken where --steps 1e6 was "invalid int value".
    argv = ["--logdir", "runs", "--configs", "pendulum", "--steps"]
    assert sweep.parse_args([*argv, "1e6"]).steps == 1_000_000
    with pytest.raises(SystemExit):
        sweep.parse_args([*argv, "many"])
    assert capsys.readouterr().err.endswith(
        "error: argument --steps: steps='many': expected an integer\n"
    )

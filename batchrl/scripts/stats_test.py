import dataclasses
import json
import shutil

import numpy as np
import pytest
from scipy import stats as scipy_stats

import batchrl
from batchrl.configs import presets, train_config
from batchrl.scripts import stats, sweep, table
from batchrl.training import run_folder, session


def write_runs(path, config, returns, best=None):
    with path.open("a") as file:
        for seed, value in enumerate(returns):
            record = {"benchmark": "learning", "config": config, "seed": seed, "finished": True}
            record |= {"final_return": value, "best_eval_return": (best or returns)[seed]}
            file.write(json.dumps(record) + "\n")


def test_iqm_intervals_worst_seed_and_targets_of_each_config(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    cheetah = [7000.0, 7400.0, 6100.0, 8000.0, 7700.0, 5900.0, 7300.0, 7100.0, 7900.0, 6800.0]
    write_runs(results, "cheetah_clipped", cheetah)
    write_runs(results, "reacher_clipped", [-4.0, -3.9, -4.3, -4.1])
    out = tmp_path / "profile.png"
    assert stats.main([str(results), "--out", str(out), "--reps", "500"]) == 0
    line = json.loads(capsys.readouterr().out)
    summary = line["configs"]["cheetah_clipped"]
    assert summary["seeds"] == list(range(10)) and summary["worst"] == 5900.0
    assert summary["iqm"] == pytest.approx(scipy_stats.trim_mean(cheetah, 0.25), abs=0.01)
    low, high = summary["iqm_95ci"]
    assert low < summary["iqm"] < high and high - low < max(cheetah) - min(cheetah)
    assert summary["iqm_over_target"] == pytest.approx(summary["iqm"] / 7115.0, abs=1e-3)
    assert summary["worst_over_target"] == pytest.approx(5900.0 / 7115.0, abs=1e-3)
    reacher = line["configs"]["reacher_clipped"]
    assert reacher["worst"] == -4.3  # The lowest return, the furthest from the target.
    assert reacher["worst_over_target"] == pytest.approx(4.1 / 4.3, abs=1e-3)
    assert out.stat().st_size > 10_000


def test_a_line_that_is_not_json_is_named(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    results.write_text('{"benchmark": "learning"}\nnot json\n')
    assert stats.main([str(results)]) == 2
    assert capsys.readouterr().err.strip() == f"stats: error: {results}:2 is not a JSON line"
    assert np.isfinite(stats.fraction(np.array(-4.0), -4.1))


def test_a_cut_last_line_of_a_sweep_killed_while_writing_it_is_left_out(tmp_path, capsys):
    # The sweep itself reads past it and cuts it off before it appends its next line.
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [3000.0, 2000.0, 1000.0])
    *whole, last = results.read_text().splitlines(keepends=True)
    results.write_text("".join(whole) + last[:50])
    assert stats.main([str(results), "--reps", "100"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["configs"]["hopper_clipped"]["seeds"] == [0, 1]
    assert captured.err == f"stats: note: {results}:3 was cut short while written; left out\n"


@pytest.mark.parametrize("name", ["profile", "profile.pnj"])
def test_an_out_that_names_no_image_format_is_refused_before_anything_is_written(
    tmp_path, capsys, name
):
    # Matplotlib would write profile.png for "profile": not the file the user named.
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [3000.0, 2000.0])
    with pytest.raises(SystemExit) as exit_:
        stats.main([str(results), "--out", str(tmp_path / name), "--reps", "10"])
    assert exit_.value.code == 2 and list(tmp_path.iterdir()) == [results]
    err = capsys.readouterr().err
    assert f"--out {str(tmp_path / name)!r} has " in err and "allowed: " in err and "png" in err


def test_an_out_in_a_folder_not_there_yet_is_drawn_there_and_one_below_a_file_refused(
    tmp_path, capsys
):
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [3000.0, 2000.0])
    out = tmp_path / "figures" / "sweep" / "profile.png"
    assert stats.main([str(results), "--out", str(out), "--reps", "10"]) == 0
    assert out.stat().st_size > 10_000 and capsys.readouterr().err == f"stats: wrote {out}\n"
    # Refused before the statistics, not after them: nothing printed, nothing drawn.
    below = tmp_path / "results.jsonl" / "profile.png"
    with pytest.raises(SystemExit) as exit_:
        stats.main([str(results), "--out", str(below), "--reps", "10"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == ""
    assert captured.err.splitlines()[-1] == (
        f"stats: error: --out {str(below)!r}: {results} is a file, not a folder"
    )


def test_best_evaluations_instead_of_final_returns(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    final = [2000.0, 3400.0, 3500.0, 1600.0]
    best = [3300.0, 3500.0, 3600.0, 2700.0]
    write_runs(results, "hopper_clipped", final, best)
    assert stats.main([str(results), "--reps", "200"]) == 0
    assert json.loads(capsys.readouterr().out)["configs"]["hopper_clipped"]["worst"] == 1600.0
    out = tmp_path / "profile.png"
    assert stats.main([str(results), "--score", "best", "--out", str(out), "--reps", "200"]) == 0
    line = json.loads(capsys.readouterr().out)
    summary = line["configs"]["hopper_clipped"]
    assert line["score"] == "best" and summary["scores"] == best and summary["worst"] == 2700.0
    assert summary["worst_over_target"] == pytest.approx(2700.0 / 2609.0, abs=1e-3)
    with pytest.raises(SystemExit):
        stats.main([str(results), "--score", "last"])
    assert "invalid choice: 'last'" in capsys.readouterr().err
    # Lines of a sweep run without --evaluate-best have no kept best policy to read.
    assert stats.main([str(results), "--score", "kept"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("has no kept_best_return: run the sweep with --evaluate-best")


def test_pixel_presets_are_held_to_their_own_tasks_targets():
    # breakout_minatar's first word names the Atari preset's game; its target is MinAtar's.
    assert stats.task_of("breakout_minatar") == "Breakout-MinAtar"
    assert stats.TARGETS[stats.task_of("freeway_minatar")] == 58.0
    assert stats.task_of("minigrid_doorkey") == "MiniGrid-DoorKey-5x5-v0"
    assert stats.task_of("walker_clipped") == "Walker2d-v5"
    assert stats.task_of("breakout") is None  # Atari: no target yet.


def test_the_profiles_axis_names_the_targets_of_its_tasks():
    label = stats.axis_label("final", ["HalfCheetah-v5", "Hopper-v5"])
    assert label == "final return / best published PPO at 1M steps"
    label = stats.axis_label("best", ["Breakout-MinAtar", "Freeway-MinAtar"])
    assert label == "best evaluation along training / gymnax's PPO at 10M steps"
    label = stats.axis_label("final", ["HalfCheetah-v5", "MiniGrid-DoorKey-5x5-v0"])
    assert label == "final return / each task's target (stats.TARGETS)"


def write_trained(path, config, returns, **changed):
    """Lines as a sweep writes them, with the preset's settings and `changed`."""
    settings = dataclasses.asdict(train_config.replace(presets.get(config), **changed))
    with path.open("a") as file:
        for seed, value in enumerate(returns):
            record = {"benchmark": "learning", "config": config, "seed": seed, "finished": True}
            record |= {"final_return": value, "settings": {**settings, "seed": seed}}
            file.write(json.dumps(record) + "\n")


def test_a_preset_trained_on_another_env_is_held_to_that_envs_target(tmp_path, capsys):
    # cheetah_clipped's runs on Hopper were divided by HalfCheetah's 7,115, not Hopper's 2,609.
    results = tmp_path / "results.jsonl"
    write_trained(results, "cheetah_clipped", [2400.0, 2600.0, 2800.0], env="Hopper-v5")
    out = tmp_path / "profile.png"
    assert stats.main([str(results), "--reps", "50", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)["configs"]["cheetah_clipped"]
    assert summary["task"] == "Hopper-v5" and summary["target"] == 2609.0
    assert summary["iqm_over_target"] == pytest.approx(2600.0 / 2609.0, abs=1e-3)
    assert table.main([str(results), "--reps", "50"]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[2]
        .startswith("| `cheetah_clipped` on Hopper-v5 | 0-2 | 2,600 (1.00) [")
    )
    # Beside its runs on its own env, each set is named apart and held to its own task's.
    write_trained(results, "cheetah_clipped", [7000.0, 7200.0])
    assert stats.main([str(results), "--reps", "50"]) == 0
    configs = json.loads(capsys.readouterr().out)["configs"]
    assert configs["cheetah_clipped [env=HalfCheetah-v5]"]["target"] == 7115.0
    assert configs["cheetah_clipped [env=Hopper-v5]"]["target"] == 2609.0


def test_a_task_changed_by_env_kwargs_or_an_env_of_no_target_has_none(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    kwargs = {"ctrl_cost_weight": 0.0}  # An easier HalfCheetah than the published one's.
    write_trained(results, "cheetah_clipped", [9000.0, 9100.0], env_kwargs=kwargs)
    write_trained(results, "hopper_clipped", [-150.0, -160.0], env="Pendulum-v1")
    out = tmp_path / "profile.png"
    assert stats.main([str(results), "--reps", "50", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    configs = json.loads(captured.out)["configs"]
    assert configs["cheetah_clipped"]["task"] is None and "target" not in configs["cheetah_clipped"]
    assert configs["hopper_clipped"]["task"] is None and "target" not in configs["hopper_clipped"]
    assert captured.err.startswith(
        "stats: error: no run of a task with a target, a return to divide its scores by: "
        "nothing to profile (the tasks with one: HalfCheetah-v5, Hopper-v5, "
    )
    # The preset's own env and kwargs, as its line writes them back, keep its task.
    write_trained(tmp_path / "doorkey.jsonl", "minigrid_doorkey", [0.95, 0.96])
    assert stats.main([str(tmp_path / "doorkey.jsonl"), "--reps", "50"]) == 0
    summary = json.loads(capsys.readouterr().out)["configs"]["minigrid_doorkey"]
    assert summary["task"] == "MiniGrid-DoorKey-5x5-v0" and summary["target"] == 0.9


def test_only_a_runs_last_line_must_hold_the_score(tmp_path, capsys):
    # A sweep run again with --evaluate-best: its runs' lines again, with their kept bests.
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [2000.0, 3400.0])
    with results.open("a") as file:
        for seed, (final, kept) in enumerate([(2000.0, 2500.0), (3400.0, 3300.0)]):
            record = {"benchmark": "learning", "config": "hopper_clipped", "seed": seed}
            record |= {"finished": True, "final_return": final, "kept_best_return": kept}
            file.write(json.dumps(record) + "\n")
    assert stats.main([str(results), "--score", "kept", "--reps", "50"]) == 0
    assert json.loads(capsys.readouterr().out)["configs"]["hopper_clipped"]["scores"] == [
        2500.0,
        3300.0,
    ]
    # The lines of a lower budget, before the sweep ran on with --evaluate-best: a config
    # of their own, without kept returns, left out where the other is counted.
    for seed, budget in [(0, 1000), (1, 1000), (0, 2000), (1, 2000)]:
        record = {"benchmark": "learning", "config": "walker_clipped", "seed": seed}
        record |= {"finished": True, "final_return": 1.0, "settings": {"steps": budget}}
        with results.open("a") as file:
            file.write(json.dumps(record | ({"kept_best_return": 9.0} if budget > 1000 else {})))
            file.write("\n")
    assert stats.main([str(results), "--score", "kept", "--reps", "50"]) == 0
    captured = capsys.readouterr()
    assert list(json.loads(captured.out)["configs"]) == [
        "hopper_clipped",
        "walker_clipped [steps=2000]",
    ]
    assert captured.err == (
        "stats: note: walker_clipped [steps=1000] left out: its lines have no kept_best_return\n"
    )
    write_runs(results, "hopper_clipped", [2100.0])  # Seed 0 trained again, not evaluated.
    assert stats.main([str(results), "--score", "kept"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"stats: error: {results}:9 has no kept_best_return: run the sweep with --evaluate-best"
    )


def test_reps_below_one_are_refused_in_one_line(tmp_path, capsys):
    # One seed a config: no interval to draw, so --out met the zero resamples first.
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [2000.0])
    with pytest.raises(SystemExit) as exit_:
        stats.main([str(results), "--reps", "0", "--out", str(tmp_path / "profile.png")])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith("error: --reps must be at least 1, got 0")
    assert not (tmp_path / "profile.png").exists()


def test_runs_that_have_kept_no_phase_are_said_so_not_no_runs(tmp_path, capsys):
    # A run started and stopped before its first phase: its config, no metrics.jsonl.
    logdir = tmp_path / "runs"
    run = logdir / "20261208T012810-pendulum_jax"
    run.mkdir(parents=True)
    run_folder.write_config(run, presets.get("pendulum_jax"))
    for script in (stats, table):
        name = script.__name__.rsplit(".", 1)[1]
        assert script.main([str(run)]) == 2
        said = f"{name}: error: run folder {run} has no metrics.jsonl yet\n"
        assert capsys.readouterr().err == said
        assert script.main([str(logdir)]) == 2
        said = f"the run folders in {logdir} ({run.name}) have no metrics.jsonl yet\n"
        assert capsys.readouterr().err == f"{name}: error: {said}"


def test_a_sweeps_folder_is_read_through_its_lines_and_an_empty_one_is_refused(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    write_runs(results, "hopper_clipped", [2000.0, 3000.0])
    assert stats.main([str(tmp_path), "--reps", "50"]) == 0
    assert json.loads(capsys.readouterr().out)["configs"]["hopper_clipped"]["seeds"] == [0, 1]
    (tmp_path / "empty").mkdir()
    assert stats.main([str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == (
        f"stats: error: {tmp_path / 'empty'} holds no run folder and no results.jsonl: give a "
        "sweep's results.jsonl, its folder, run folders or the folder that holds them\n"
    )
    # A path mistyped: the OS's "[Errno 2] No such file or directory", said as the others.
    for script in (stats, table):
        assert script.main([str(tmp_path / "results.json")]) == 2
        assert capsys.readouterr().err == (
            f"{script.__name__.rsplit('.', 1)[1]}: error: {str(tmp_path / 'results.json')!r} "
            "does not exist: give a sweep's results.jsonl, its folder, run folders or the "
            "folder that holds them\n"
        )


def test_the_run_folders_of_train_seeds_are_read_as_a_sweeps_lines(tmp_path, capsys):
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    settings |= dict(policy_layers=(16,), value_layers=(16,))
    runs = batchrl.train("pendulum_jax", steps=400, seeds=[3, 4], logdir=tmp_path, **settings)
    finals = {run.config.seed: run.metrics[-1]["final/return"] for run in runs}
    capsys.readouterr()  # The runs' own lines.
    for given in ([tmp_path], [run.rundir for run in runs]):  # The logdir, or the folders.
        assert stats.main([*map(str, given), "--reps", "50"]) == 0
        summary = json.loads(capsys.readouterr().out)["configs"]["pendulum_jax"]
        assert summary["seeds"] == [3, 4]
        assert sorted(summary["scores"]) == pytest.approx(sorted(finals.values()), abs=0.01)
    # Each folder names the code that trained it, and the table its commit, as a sweep's.
    commit = session.commit()  # None outside a git checkout: "not recorded".
    assert [session.commit_of(run.rundir) for run in runs] == [commit, commit]
    assert table.main([str(tmp_path), "--reps", "50"]) == 0
    cell = f"{commit[:7]}{'-dirty' * commit.endswith('-dirty')}" if commit else "not recorded"
    assert capsys.readouterr().out.splitlines()[2].endswith(f" | {cell} |")
    # A second run of seed 3 in the folder: one of the two was left out without a word.
    again = tmp_path / ("20990101T000000-" + runs[0].rundir.name.split("-", 1)[1])
    shutil.copytree(runs[0].rundir, again)
    assert stats.main([str(tmp_path), "--reps", "50"]) == 0
    assert capsys.readouterr().err == (
        f"stats: note: {runs[0].rundir} and {again} are both pendulum_jax seed 3: the last counts\n"
    )


def test_runs_of_one_preset_at_other_settings_are_counted_apart(tmp_path, capsys):
    # A grid: each learning rate's sweep in its folder, both runs of `pendulum_jax`.
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    settings |= dict(policy_layers=(16,), value_layers=(16,))
    finals = {}
    for rate in (1e-4, 1e-3):
        logdir = tmp_path / f"lr{rate}"
        runs = batchrl.train(
            "pendulum_jax", steps=400, seeds=[3, 4], logdir=logdir, learning_rate=rate, **settings
        )
        finals[rate] = sorted(run.metrics[-1]["final/return"] for run in runs)
    capsys.readouterr()
    assert stats.main([str(tmp_path / "lr0.0001"), str(tmp_path / "lr0.001"), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    configs = json.loads(captured.out)["configs"]
    assert sorted(configs) == [
        "pendulum_jax [learning_rate=0.0001]",
        "pendulum_jax [learning_rate=0.001]",
    ]
    for rate in (1e-4, 1e-3):
        summary = configs[f"pendulum_jax [learning_rate={rate}]"]
        assert summary["seeds"] == [3, 4]
        assert sorted(summary["scores"]) == pytest.approx(finals[rate], abs=0.01)
    assert captured.err == ""  # No run of one rate counted as the other's.


def test_a_run_stopped_before_its_budget_is_said_to_be_left_out(tmp_path, capsys):
    # A seed killed and not resumed was left out of the statistics without a word.
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    settings |= dict(policy_layers=(16,), value_layers=(16,), phase_steps=200)
    batchrl.train("pendulum_jax", steps=400, seed=3, logdir=tmp_path, **settings)
    stopped = batchrl.train(
        "pendulum_jax", steps=400, seed=4, logdir=tmp_path, callback=lambda row: False, **settings
    )
    capsys.readouterr()
    assert stats.main([str(tmp_path), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["configs"]["pendulum_jax"]["seeds"] == [3]
    note = (
        f"note: {stopped.rundir} is left out: it stopped at env step 200, before its "
        "budget (resume it to count it)\n"
    )
    assert captured.err == f"stats: {note}"
    # table's rows leave it out too, and said it nowhere: a paper's table lost a seed.
    assert table.main([str(tmp_path), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    assert "| `pendulum_jax` | 3 |" in captured.out
    assert captured.err == f"table: {note}"
    # A finished seed 4 of other settings, counted apart, hid the note.
    other = tmp_path / "other"
    batchrl.train("pendulum_jax", steps=400, seed=4, logdir=other, learning_rate=1e-3, **settings)
    capsys.readouterr()
    assert table.main([str(tmp_path), str(other), "--reps", "50"]) == 0
    assert capsys.readouterr().err == f"table: {note}"


def test_runs_a_later_file_lists_again_are_said_and_counted_from_it(tmp_path, capsys):
    # Counted from the second file only, the first file's three runs left out in silence.
    solo, together = tmp_path / "solo.jsonl", tmp_path / "together.jsonl"
    write_runs(solo, "pendulum_jax", [-1000.0, -1100.0, -1200.0])
    write_runs(solo, "cartpole_jax", [500.0])
    write_runs(together, "pendulum_jax", [-300.0, -400.0])
    assert stats.main([str(solo), str(together), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    scores = json.loads(captured.out)["configs"]["pendulum_jax"]["scores"]
    assert scores == [-300.0, -400.0, -1200.0]
    assert captured.err == (
        f"stats: note: 2 run(s) of {solo} are listed again in {together}, whose lines count (a "
        "run listed twice counts its last line): pendulum_jax seed 0, pendulum_jax seed 1\n"
    )


def test_statistics_print_when_the_profile_cannot_be_drawn(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    write_runs(results, "pendulum_jax", [-300.0, -400.0])
    assert stats.main([str(results), "--reps", "50", "--out", str(tmp_path / "p.png")]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["configs"]["pendulum_jax"]["worst"] == -400.0
    assert captured.err.startswith(
        "stats: error: no run of a task with a target, a return to divide its scores by: "
        "nothing to profile (the tasks with one: HalfCheetah-v5, Hopper-v5, "
    )
    write_runs(results, "hopper_clipped", [2000.0, 2500.0])  # Drawn, the other named.
    assert stats.main([str(results), "--reps", "50", "--out", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().err == (
        "stats: note: the profile leaves out pendulum_jax: no target (stats.TARGETS) to "
        f"divide their scores by\nstats: wrote {tmp_path / 'p.png'}\n"
    )


@pytest.mark.slow  # Three tiny trainings: 25 s.
def test_a_sweeps_lines_and_run_folders_of_one_config_are_one_configs_seeds(tmp_path, capsys):
    # Layers are tuples in a run folder's config and lists in a sweep's JSON lines: the two
    # read as other settings, `pendulum_jax [policy_layers=[16], ...]`, not one config's seeds.
    settings = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4)
    settings |= dict(policy_layers=(16,), value_layers=(16,))
    batchrl.train("pendulum_jax", steps=400, seeds=[3, 4], logdir=tmp_path / "runs", **settings)
    argv = ["--logdir", str(tmp_path / "sweep"), "--configs", "pendulum_jax", "--seeds", "5"]
    argv += ["--steps", "400"]
    for key, value in settings.items():
        value = ",".join(map(str, value)) if isinstance(value, tuple) else value
        argv += ["--set", f"{key}={value}"]
    assert sweep.main(argv) == 0
    capsys.readouterr()
    given = [str(tmp_path / "runs"), str(tmp_path / "sweep" / "results.jsonl")]
    assert stats.main([*given, "--reps", "50"]) == 0
    assert json.loads(capsys.readouterr().out)["configs"]["pendulum_jax"]["seeds"] == [3, 4, 5]
    assert table.main(given) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split(" | ")[:2] for row in rows] == [["| `pendulum_jax`", "3-5"]]

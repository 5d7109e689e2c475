"""Tests for the plot script: images from fake runs, resumed runs, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from matplotlib import collections

from batchrl.configs import presets, train_config
from batchrl.scripts import curve_points, plot
from batchrl.training import run_folder

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fake_run(folder, offset: float) -> None:
    """A run folder whose metrics.jsonl has train returns every phase and eval every other."""
    folder.mkdir(parents=True)
    with (folder / "metrics.jsonl").open("w") as file:
        for phase in range(10):
            steps = 10_000 * (phase + 1)
            record = {
                "step": steps,
                "perf/env_steps": steps,
                "train/return": offset + 50.0 * phase,
                "eval/return": offset + 60.0 * phase if phase % 2 else None,
                "train/kl": 0.01,
            }
            file.write(json.dumps(record) + "\n")


@pytest.fixture
def runs(tmp_path):
    first, second = tmp_path / "runs" / "clipped", tmp_path / "runs" / "penalty"
    fake_run(first, offset=-800.0)
    fake_run(second, offset=-700.0)
    return first, second


def assert_png(path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000


def test_main_writes_a_png_of_two_runs(runs, tmp_path, capsys):
    out = tmp_path / "figures" / "curves.png"
    assert plot.main([str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    assert_png(out)
    assert str(out) in capsys.readouterr().out


def test_main_draws_the_chosen_metrics(runs, tmp_path):
    out = tmp_path / "kl.png"
    assert plot.main([str(runs[0]), "--out", str(out), "--metrics", "train/kl"]) == 0
    assert_png(out)


def test_figure_has_a_line_per_run_and_metric_and_a_legend_of_both(runs):
    records = {path.name: plot.load(path) for path in runs}
    figure = plot.draw(records, ["train/return", "eval/return"])
    (axes,) = figure.axes
    assert len(axes.lines) == 4
    assert [line.get_linestyle() for line in axes.lines] == ["-", "--", "-", "--"]
    assert axes.lines[0].get_color() != axes.lines[2].get_color()
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["clipped", "penalty", "train/return", "eval/return"]
    # Eval returns exist on every other phase only; their null entries are skipped.
    assert list(axes.lines[1].get_xdata()) == [20_000, 40_000, 60_000, 80_000, 100_000]


def test_one_metric_names_the_axis_and_the_legend_names_only_the_runs(runs):
    records = {path.name: plot.load(path) for path in runs}
    (axes,) = plot.draw(records, ["eval/return"]).axes
    assert axes.get_ylabel() == "eval/return"
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["clipped", "penalty"]


def test_panels_give_each_metric_its_own_axes_over_a_shared_x(runs, tmp_path):
    records = {path.name: plot.load(path) for path in runs}
    figure = plot.draw(records, ["eval/return", "train/kl"], panels=True)
    returns, kl = figure.axes
    assert [axes.get_ylabel() for axes in figure.axes] == ["eval/return", "train/kl"]
    assert len(returns.lines) == len(kl.lines) == 2  # One line per run in each panel.
    assert list(kl.lines[0].get_ydata()) == [0.01] * 10
    assert returns.get_shared_x_axes().joined(returns, kl)
    # The runs' legend beside the panels, where no name hides a curve.
    assert returns.get_legend() is None and len(figure.legends) == 1
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["clipped", "penalty"]
    out = tmp_path / "panels.png"
    argv = [str(runs[0]), "--panels", "--metrics", "eval/return", "train/kl", "--out", str(out)]
    assert plot.main(argv) == 0
    assert_png(out)


def png_height(path) -> int:
    return int.from_bytes(path.read_bytes()[20:24], "big")  # The IHDR chunk's height.


def test_metrics_of_other_quantities_get_panels_unless_told(runs, tmp_path):
    # A return and an entropy on one axes drew the entropy as a flat line at 0.
    drawn = {}
    for name, flags in {"auto": [], "one": ["--no-panels"]}.items():
        drawn[name] = tmp_path / f"{name}.png"
        argv = [str(runs[0]), "--metrics", "eval/return", "train/kl", *flags]
        assert plot.main([*argv, "--out", str(drawn[name])]) == 0
    returns = tmp_path / "returns.png"
    argv = [str(runs[0]), "--metrics", "train/return", "eval/return", "--out", str(returns)]
    assert plot.main(argv) == 0
    # Two panels of 1.6 inches and a margin, against one axes of 5 inches, at 100 dpi.
    assert [png_height(drawn["auto"]), png_height(drawn["one"])] == [420, 500]
    assert png_height(returns) == 500  # One quantity, one axes.
    records = {path.name: plot.load(path) for path in runs}
    lengths = plot.draw(records, ["train/length", "eval/length"])
    assert lengths.axes[0].get_ylabel() == "length"


def test_series_skips_nulls_and_keeps_the_redone_points_of_a_resumed_run():
    records = [
        {"perf/env_steps": 100, "train/return": 1.0},
        {"perf/env_steps": 200, "train/return": None},
        {"perf/env_steps": 300, "train/return": 3.0},
        {"perf/env_steps": 400, "train/return": 4.0},
        {"train/return": 9.0},
        # Resumed from a checkpoint at 200 env steps.
        {"perf/env_steps": 300, "train/return": 3.5},
        {"perf/env_steps": 400, "train/return": 4.5},
    ]
    assert curve_points.series(records, "train/return") == ([100, 300, 400], [1.0, 3.5, 4.5])
    assert curve_points.series(records, "eval/return") == ([], [])


def test_legend_uses_paths_when_folder_names_clash(tmp_path):
    paths = [tmp_path / "a" / "seed0", tmp_path / "b" / "seed0"]
    assert plot.labels(paths) == [str(path) for path in paths]
    assert plot.labels(paths[:1]) == ["seed0"]


def test_missing_run_folder_exits_2_with_one_line(runs, tmp_path, capsys):
    missing = tmp_path / "runs" / "nope"
    out = tmp_path / "curves.png"
    assert plot.main([str(runs[0]), str(missing), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error == f"plot: error: run folder not found: {missing}\n"
    assert not out.exists()


def test_a_metric_no_run_has_or_an_unknown_format_exits_2_with_one_line(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert plot.main([str(runs[0]), "--metrics", "eval/retrun", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert (
        error
        == "plot: error: no run has a value of metric 'eval/retrun'; did you mean 'eval/return'?\n"
    )
    assert not out.exists()
    assert plot.main([str(runs[0]), "--out", str(tmp_path / "curves.xyz")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"plot: error: --out {str(tmp_path / 'curves.xyz')!r} has extension ")
    assert "'.xyz', allowed: " in error and "png" in error
    assert len(error.splitlines()) == 1


def test_runs_not_yet_evaluated_draw_their_train_returns_by_default(tmp_path, capsys):
    # A run stopped before its first evaluation (pendulum_jax evaluates every 10 phases)
    # had no plot of the defaults: "no run has a value of metric 'eval/return'; did you
    # mean 'train/return'?", the other default.
    run = tmp_path / "early"
    fake_run(run, offset=-800.0)
    lines = (run / "metrics.jsonl").read_text().splitlines()[:2]
    rows = [{k: v for k, v in json.loads(line).items() if k != "eval/return"} for line in lines]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "c.png"
    assert plot.main([str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().err == (
        "plot: note: eval/return has no value in any row so far; left out\n"
    )
    assert_png(out)
    assert plot.main([str(run), "--metrics", "eval/return", "--out", str(out)]) == 2


def test_a_metric_null_in_every_row_is_left_out_or_said_so_not_suggested(tmp_path, capsys):
    # A tiny acrobot run ended no training episode: "no run has a value of metric
    # 'train/return'; did you mean 'train/return'?", and no image of its eval returns.
    run = tmp_path / "acrobot"
    seed_run(run, 0.0, seconds=1.0)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    rows = [{**json.loads(line), "train/return": None} for line in lines]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "c.png"
    assert plot.main([str(run), "--out", str(out)]) == 0  # train/ and eval/return asked.
    assert capsys.readouterr().err == (
        "plot: note: train/return is null in every row so far; left out\n"
    )
    assert_png(out)
    assert plot.main([str(run), "--metrics", "train/return", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "plot: error: no run has a value of metric 'train/return'; it is null in every row so "
        "far; plot others with --metrics\n"
    )


def test_an_image_the_disk_cannot_take_leaves_the_one_drawn_before(runs, tmp_path):
    # A full disk cut the image it overwrote: PIL then read "image file is truncated".
    out = tmp_path / "curves.png"
    assert plot.main([str(runs[0]), "--out", str(out)]) == 0
    before = out.read_bytes()
    limited = (  # Files past 20 kB refused (EFBIG), as a full disk refuses them (ENOSPC).
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
        "from batchrl.scripts import plot\n"
        "sys.exit(plot.main(sys.argv[1:]))\n"
    )
    argv = [str(runs[0]), "--metrics", "train/return", "eval/return", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-B", "-c", limited, *argv], capture_output=True, text=True, timeout=120
    )
    assert (
        done.returncode == 2
        and done.stderr
        == f"plot: error: cannot write '{out}': File too large; make room or "
        f"make '{tmp_path}' writable, then run the command again\n"
    )
    assert out.read_bytes() == before  # No temporary file left beside it either:
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.png", "runs"]


def test_an_out_with_no_extension_is_refused_not_written_elsewhere(runs, tmp_path, capsys):
    # Matplotlib would write curves.png while the command said it wrote curves.
    out = tmp_path / "curves"
    assert plot.main([str(runs[0]), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"plot: error: --out {str(out)!r} has no extension, allowed: ")
    assert "png, ps" in error and len(error.splitlines()) == 1
    assert list(tmp_path.iterdir()) == [tmp_path / "runs"]


def test_a_run_of_one_point_is_drawn_as_a_marker(tmp_path):
    seed_run(tmp_path / "seed0-cheetah", 0.0, seconds=360.0)
    one = {"seed0-cheetah": plot.load(tmp_path / "seed0-cheetah")[:1]}
    for seeds in (False, True):
        (axes,) = plot.draw(one, ["eval/return"], seeds=seeds).axes
        (line,) = axes.lines
        assert list(line.get_xdata()) == [1000] and line.get_marker() == plot.MARKERS[0]


def test_the_legend_marks_only_the_metrics_drawn_as_one_point(tmp_path):
    # Every phase's train return a line, one eval return a point: only the eval is marked.
    seed_run(tmp_path / "seed0-cheetah", 0.0, seconds=360.0)
    records = plot.load(tmp_path / "seed0-cheetah")
    for number, record in enumerate(records):
        record["train/return"] = float(number)
        if number:
            del record["eval/return"]
    for seeds in (False, True):
        figure = plot.draw({"seed0-cheetah": records}, ["train/return", "eval/return"], seeds=seeds)
        handles = figure.axes[0].get_legend().legend_handles
        markers = {handle.get_label(): handle.get_marker() for handle in handles}
        assert markers["train/return"] in ("", "None") and markers["eval/return"] == plot.MARKERS[1]


def test_run_folder_without_metrics_exits_2_with_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert plot.main([str(empty), "--out", str(tmp_path / "curves.png")]) == 2
    assert capsys.readouterr().err == (
        f"plot: error: {empty} has no metrics.jsonl in it or a folder in it: give run folders "
        "or their folder\n"
    )
    # A run that has kept no phase yet: its config, no rows.
    run_folder.write_config(empty, presets.get("pendulum_jax"))
    assert plot.main([str(empty), "--out", str(tmp_path / "curves.png")]) == 2
    assert capsys.readouterr().err == (
        f"plot: error: run folder {empty} has no metrics.jsonl yet\n"
    )
    assert not (tmp_path / "curves.png").exists()
    assert plot.main([str(tmp_path), "--out", str(tmp_path / "curves.png")]) == 2
    assert capsys.readouterr().err == (
        f"plot: error: the run folders in {tmp_path} (empty) have no metrics.jsonl yet\n"
    )


def test_a_run_with_no_rows_yet_is_said_so(tmp_path, capsys):
    # A run just started: its metrics.jsonl is open, its first phase not written.
    run = tmp_path / "20261130T140503-pendulum_jax"
    run.mkdir()
    (run / "metrics.jsonl").touch()
    assert plot.main([str(run), "--out", str(tmp_path / "curves.png")]) == 2
    assert capsys.readouterr().err == (
        "plot: error: no run has a value of metric 'train/return'; the runs have no rows yet\n"
    )


def test_unreadable_metrics_exit_2_with_one_line(tmp_path, capsys):
    run = tmp_path / "broken"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n{oops\n{"step": 2}\n')
    assert plot.main([str(run), "--out", str(tmp_path / "curves.png")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("plot: error: ") and "line 2" in error
    assert error.count("\n") == 1


def run_module(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "batchrl.scripts.plot", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_module_runs_from_the_command_line(runs, tmp_path):
    out = tmp_path / "curves.png"
    result = run_module(str(runs[0]), str(runs[1]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert_png(out)


def test_module_reports_a_missing_folder_without_a_traceback(tmp_path):
    missing = tmp_path / "nope"
    result = run_module(str(missing), "--out", str(tmp_path / "curves.png"))
    assert result.returncode == 2
    assert result.stderr == f"plot: error: run folder not found: {missing}\n"


def seed_run(folder, offset: float, seconds: float) -> None:
    """A sweep's run folder: eval every phase, each phase taking `seconds`."""
    folder.mkdir(parents=True)
    with (folder / "metrics.jsonl").open("w") as file:
        for phase in range(4):
            steps = 1000 * (phase + 1)
            record = {
                "step": steps,
                "perf/env_steps": steps,
                "eval/return": offset + 10.0 * phase,
                "perf/train_seconds": seconds * 0.75,
                "perf/eval_seconds": seconds * 0.25,
            }
            file.write(json.dumps(record) + "\n")


def test_seeds_of_a_config_are_drawn_as_their_mean_and_range(tmp_path):
    sweep = tmp_path / "sweep"
    for seed, offset in enumerate((0.0, 30.0, 90.0)):
        seed_run(sweep / f"seed{seed}-cheetah", offset, seconds=360.0)
    seed_run(sweep / "seed0-hopper", 5.0, seconds=360.0)
    runs = {str(path): plot.load(path) for path in sorted(sweep.iterdir())}
    figure = plot.draw(runs, ["eval/return"], seeds=True)
    (axes,) = figure.axes
    mean = axes.lines[0]
    assert list(mean.get_xdata()) == [1000, 2000, 3000, 4000]
    assert list(mean.get_ydata()) == [40.0, 50.0, 60.0, 70.0]
    band = axes.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == 0.0 and band[:, 1].max() == 120.0
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend[:2] == ["cheetah (3 seeds, mean and range)", "hopper (1 seed)"]


def test_seeds_of_one_name_on_different_settings_are_refused_not_averaged(tmp_path, capsys):
    # `--set env=...` keeps the preset's name: the two runs were one curve of two "seeds".
    sweep = tmp_path / "sweep"
    base = presets.get("pendulum")
    for seed, env in enumerate(("Pendulum-v1", "MountainCarContinuous-v0", "Pendulum-v1")):
        seed_run(sweep / f"seed{seed}-pendulum", 0.0, seconds=1.0)
        config = train_config.replace(base, env=env, seed=seed)
        run_folder.write_config(sweep / f"seed{seed}-pendulum", config)
    out = tmp_path / "c.png"
    assert plot.main([str(sweep), "--seeds", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "plot: error: --seeds would average runs named 'pendulum' of different settings: "
        "seed0-pendulum (env='Pendulum-v1'), seed1-pendulum (env='MountainCarContinuous-v0'), "
        "seed2-pendulum (env='Pendulum-v1'); plot them without --seeds\n"
    )
    assert not out.exists()
    metric = ["--metrics", "eval/return"]  # Each run a curve of its own:
    assert plot.main([str(sweep), *metric, "--out", str(out)]) == 0
    # A hyperparameter too; a budget raised on resume, or where it ran, may differ.
    config = train_config.replace(base, seed=1, learning_rate=1e-3, steps=2_000_000)
    run_folder.write_config(sweep / "seed1-pendulum", config)
    run_folder.write_config(sweep / "seed2-pendulum", train_config.replace(base, seed=2))
    assert plot.main([str(sweep), "--seeds", "--out", str(out)]) == 2
    assert "seed1-pendulum (learning_rate=0.001)" in capsys.readouterr().err
    # How often checkpoints are written and kept changes no curve: averaged (was refused).
    kept = train_config.replace(base, seed=1, keep_checkpoints=10, checkpoint_every=2)
    run_folder.write_config(sweep / "seed1-pendulum", kept)
    assert plot.main([str(sweep), "--seeds", *metric, "--out", str(out)]) == 0, capsys.readouterr()


def test_a_seed_given_twice_is_drawn_once_its_last_run(tmp_path, capsys):
    # Four logdirs of seeds 0-2 read "12 seeds, mean and range", each seed weighed 4 times.
    config = presets.get("pendulum_jax")
    for logdir, offset in (("a", 0.0), ("b", 50.0)):
        for seed in range(2):
            folder = tmp_path / logdir / f"seed{seed}-pendulum_jax"
            seed_run(folder, offset + seed, seconds=1.0)
            run_folder.write_config(folder, train_config.replace(config, seed=seed))
    out = tmp_path / "c.png"
    metric = ["--metrics", "eval/return"]
    assert (
        plot.main([str(tmp_path / "a"), str(tmp_path / "b"), "--seeds", *metric, "--out", str(out)])
        == 0
    )
    err = capsys.readouterr().err
    for seed in range(2):
        again, kept = (tmp_path / logdir / f"seed{seed}-pendulum_jax" for logdir in "ab")
        said = f"plot: note: {again} left out: {kept}, given after it, has its seed (a folder's"
        assert said in err
    # One seed run again to another budget is another run, not a repeat: refused, as
    # stats counts the two budgets apart (one was left out as a repeat).
    longer = train_config.replace(config, seed=1, steps=config.steps * 2)
    run_folder.write_config(tmp_path / "b" / "seed1-pendulum_jax", longer)
    args = [str(tmp_path / "a"), str(tmp_path / "b"), "--seeds", *metric, "--out", str(out)]
    assert plot.main(args) == 2
    assert capsys.readouterr().err == (
        f"plot: error: --seeds would draw {tmp_path / 'a' / 'seed1-pendulum_jax'} "
        f"(steps={config.steps}) and {tmp_path / 'b' / 'seed1-pendulum_jax'} "
        f"(steps={config.steps * 2}), seed 1 of 'pendulum_jax', as one: plot each budget's "
        "runs apart\n"
    )
    runs = {str(p): plot.load(p) for p in sorted((tmp_path / "b").iterdir())}
    (axes,) = plot.draw(runs, ["eval/return"], seeds=True).axes
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend[0] == "pendulum_jax (2 seeds, mean and range)"


def test_the_legend_counts_the_seeds_each_curve_averages(tmp_path):
    # A sweep under way: seed 2's first phase is written, its first evaluation not yet.
    sweep = tmp_path / "sweep"
    for seed, offset in enumerate((0.0, 30.0)):
        seed_run(sweep / f"seed{seed}-cheetah", offset, seconds=360.0)
    (sweep / "seed2-cheetah").mkdir()
    row = {"step": 1000, "perf/env_steps": 1000, "train/return": 5.0, "eval/return": None}
    (sweep / "seed2-cheetah" / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    runs = {str(path): plot.load(path) for path in sorted(sweep.iterdir())}
    (axes,) = plot.draw(runs, ["eval/return"], seeds=True).axes
    assert list(axes.lines[0].get_ydata()) == [15.0, 25.0, 35.0, 45.0]  # Two seeds' mean.
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["cheetah (2 seeds, mean and range)"]
    (axes,) = plot.draw(runs, ["eval/return", "train/return"], seeds=True).axes
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend[0] == "cheetah (1-2 seeds, mean and range)"


def test_a_run_named_twice_by_other_paths_is_one_seed(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    for seed, offset in enumerate((0.0, 30.0)):
        seed_run(sweep / f"seed{seed}-cheetah", offset, seconds=360.0)
    (tmp_path / "link").symlink_to(sweep)
    monkeypatch.chdir(tmp_path)
    args = ["--seeds", "--metrics", "eval/return", "--out"]
    assert plot.main(["sweep/seed0-cheetah", "sweep/seed1-cheetah", *args, "two.png"]) == 0
    again = [str(sweep / "seed0-cheetah"), "link/seed1-cheetah", "sweep/seed0-cheetah"]
    assert plot.main(["sweep/seed0-cheetah", "sweep/seed1-cheetah", *again, *args, "x.png"]) == 0
    # The same two seeds' mean and band, not seed 0 counted twice among four.
    assert (tmp_path / "x.png").read_bytes() == (tmp_path / "two.png").read_bytes()


def test_hours_on_x_add_up_the_phases_train_and_eval_seconds(tmp_path):
    seed_run(tmp_path / "seed0-cheetah", 0.0, seconds=360.0)
    xs, ys = curve_points.series(plot.load(tmp_path / "seed0-cheetah"), "eval/return", x="hours")
    assert xs == pytest.approx([0.1, 0.2, 0.3, 0.4]) and ys == [0.0, 10.0, 20.0, 30.0]


def test_seed_band_interpolates_seeds_evaluated_at_other_points():
    grid, mean, low, high = curve_points.seed_band(
        [([0, 2, 4], [0, 2, 4]), ([1, 3, 5], [10, 30, 50])]
    )
    assert list(grid) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # Every seed's points.
    assert list(low) == [0.0, 1.0, 2.0, 3.0, 4.0, 50.0]  # At 0 and 5, the one seed there.
    assert list(high) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert list(mean) == [0.0, 5.5, 11.0, 16.5, 22.0, 50.0]


def test_seeds_keep_every_point_where_their_ranges_part():
    # A seed still training cut the others to its one point; seeds sharing no hours (a
    # later seed's compiles cached) drew nothing at all.
    live = [([6, 12, 18, 24], [1, 2, 3, 4]), ([6, 12, 18, 24], [3, 4, 5, 6]), ([6], [5])]
    grid, mean, low, high = curve_points.seed_band(live)
    assert list(grid) == [6, 12, 18, 24] and list(mean) == [3.0, 3.0, 4.0, 5.0]
    assert list(low) == [1, 2, 3, 4] and list(high) == [5, 4, 5, 6]
    apart = [([2.5, 4.5], [1, 2]), ([7.5, 10.5], [3, 4]), ([25.5, 28.5], [5, 6])]
    grid, mean, low, _ = curve_points.seed_band(apart)
    assert list(grid) == [2.5, 4.5, 6.0, 7.5, 10.5, 18.0, 25.5, 28.5]
    # No line from one seed's last point to the next seed's first: a gap between.
    assert np.array_equal(mean, [1, 2, np.nan, 3, 4, np.nan, 5, 6], equal_nan=True)
    assert np.array_equal(low, mean, equal_nan=True)


def test_command_line_draws_seeds_against_hours(tmp_path):
    for seed in range(2):
        seed_run(tmp_path / f"seed{seed}-cheetah", 100.0 * seed, seconds=60.0)
    out = tmp_path / "hours.png"
    runs = [str(tmp_path / f"seed{seed}-cheetah") for seed in range(2)]
    result = run_module(
        *runs, "--seeds", "--x", "hours", "--metrics", "eval/return", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert_png(out)


def test_a_folder_of_runs_plots_its_runs_and_a_file_is_named_as_one(tmp_path, capsys):
    # A sweep's folder: its runs beside their logs and results.jsonl, as `sweep` leaves it.
    sweep = tmp_path / "sweep"
    seed_run(sweep / "seed0-cheetah", 0.0, seconds=360.0)
    seed_run(sweep / "seed1-cheetah", 1.0, seconds=360.0)
    (sweep / "seed0-cheetah.log").write_text("phase 1\n")
    (sweep / "results.jsonl").write_text("{}\n")
    out = tmp_path / "curves.png"
    assert plot.main([str(sweep), "--seeds", "--metrics", "eval/return", "--out", str(out)]) == 0
    assert_png(out)
    assert plot.runs_in([sweep]) == [sweep / "seed0-cheetah", sweep / "seed1-cheetah"]
    # `sweep/*`: the run folders, and files no run folder is.
    named = sorted(sweep.iterdir())
    assert plot.main([*map(str, named), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"plot: error: {named[0]} is a file, not a run folder; `plot {sweep}` plots its runs\n"
    )


def test_a_run_with_no_value_yet_is_named_and_left_out_of_the_legend(runs, tmp_path, capsys):
    started = tmp_path / "runs" / "seed0-started"
    started.mkdir()
    (started / "metrics.jsonl").write_text("")  # Its first phase not yet written.
    out = tmp_path / "curves.png"
    assert plot.main([str(runs[0]), str(started), "--seeds", "--out", str(out)]) == 0
    assert capsys.readouterr().err == (
        "plot: note: seed0-started has no value of train/return, eval/return yet; left out\n"
    )


def test_an_out_below_a_file_is_one_line_naming_the_file(runs, tmp_path, capsys):
    (tmp_path / "sweep.out").write_text("a sweep's log\n")
    out = tmp_path / "sweep.out" / "curves.png"
    assert plot.main([str(runs[0]), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"plot: error: --out {str(out)!r}: {tmp_path / 'sweep.out'} is a file, not a folder\n"
    )


def test_seeds_whose_points_no_other_seed_spans_are_marked_with_their_range(tmp_path):
    # By hours a seed whose compiles were not cached parts from the rest: its points and
    # theirs were NaN-separated single points, drawn as nothing under a legend entry.
    # Each seed has evaluated once so far.
    sweep = tmp_path / "sweep"
    for seed, seconds in enumerate((36.0, 9.0, 9.0)):
        seed_run(sweep / f"seed{seed}-cheetah", 10.0 * seed, seconds=seconds)
    records = {str(path): plot.load(path)[:1] for path in sorted(sweep.iterdir())}
    (axes,) = plot.draw(records, ["eval/return"], x="hours", seeds=True).axes
    mean = axes.lines[0]
    x, y = np.asarray(mean.get_xdata()), np.asarray(mean.get_ydata())
    assert mean.get_marker() == plot.MARKERS[0] and mean.get_markevery() == [0, 2]
    assert list(x[[0, 2]] * 3600) == pytest.approx([9.0, 36.0]) and np.isnan(y[1])
    assert list(y[[0, 2]]) == [15.0, 0.0]  # Seeds 1 and 2's mean; seed 0 alone.
    (bars,) = [c for c in axes.collections if isinstance(c, collections.LineCollection)]
    assert [list(segment[:, 1]) for segment in bars.get_segments()] == [[10, 20], [0, 0]]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["cheetah (1-2 seeds, mean and range)"]  # Not 3 at any hour.


def test_metrics_of_one_quantity_share_a_panel_in_styles_of_their_own(runs):
    records = {path.name: plot.load(path) for path in runs}
    figure = plot.draw(records, ["train/kl", "train/return", "eval/return"], panels=True)
    kl, returns = figure.axes
    assert [kl.get_ylabel(), returns.get_ylabel()] == ["train/kl", "return"]
    assert [line.get_linestyle() for line in returns.lines] == ["-", "--"] * 2
    (legend,) = figure.legends
    texts = [text.get_text() for text in legend.get_texts()]
    assert texts == ["clipped", "penalty", "train/return", "eval/return"]


def test_many_runs_each_have_a_colour_and_the_legend_stands_beside_them(tmp_path):
    records = {}
    for number in range(12):
        fake_run(tmp_path / f"run{number}", offset=float(number))
        records[f"run{number}"] = plot.load(tmp_path / f"run{number}")
    figure = plot.draw(records, ["train/return"])
    colours = {tuple(line.get_color()) for line in figure.axes[0].lines}
    assert len(colours) == 12  # tab10 gave two runs each of two colours.
    assert figure.axes[0].get_legend() is None and len(figure.legends) == 1


def test_one_points_ranges_of_two_metrics_are_told_apart_by_their_styles(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in range(2):
        seed_run(sweep / f"seed{seed}-cheetah", 10.0 * seed, seconds=9.0)
    records = {str(path): plot.load(path)[:1] for path in sorted(sweep.iterdir())}
    for rows in records.values():
        rows[0]["train/return"] = rows[0]["eval/return"] + 5
    (axes,) = plot.draw(records, ["train/return", "eval/return"], seeds=True).axes
    bars = [c for c in axes.collections if isinstance(c, collections.LineCollection)]
    assert [bar.get_linestyle()[0][1] is None for bar in bars] == [True, False]

import dataclasses
import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

import batchrl
from batchrl.scripts import evaluate, train
from batchrl.training import checkpoint, run_folder


def train_run(logdir: pathlib.Path, config: str, steps: int = 480) -> pathlib.Path:
    """Six phases of Pendulum (80 env steps each), the last three checkpoints kept."""
    settings = [
        "num_envs=2",
        "update_every=2",
        "max_length=40",
        "eval_episodes=2",
        f"steps={steps}",
        "policy_layers=16,16",
        "value_layers=16,16",
    ]
    args = ["--logdir", str(logdir), "--config", config]
    for setting in settings:
        args += ["--set", setting]
    assert train.main(args) == 0
    (folder,) = logdir.iterdir()
    return folder


# One test process runs this module (`--dist loadgroup`), so its trained run is made once.
pytestmark = pytest.mark.xdist_group("evaluate_test")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> pathlib.Path:
    return train_run(tmp_path_factory.mktemp("runs"), "pendulum_jax")


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["pendulum_jax", "pendulum"])  # JAX-native, workers.
def test_every_kept_checkpoint_on_the_same_episodes(config, request, tmp_path, capsys):
    jax_native = config == "pendulum_jax"
    run = request.getfixturevalue("run") if jax_native else train_run(tmp_path, config)
    capsys.readouterr()
    assert evaluate.main(["--logdir", str(run), "--episodes", "8"]) == 0
    rows = lines(capsys)
    assert [row["phase"] for row in rows] == [4, 5, 6]
    assert [row["env_steps"] for row in rows] == [320, 400, 480]
    assert all(row["episodes"] >= 8 and row["length"] == 40.0 for row in rows)
    # Each checkpoint starts from the same states: evaluated again alone, the same return.
    assert evaluate.main(["--logdir", str(run), "--episodes", "8", "--phases", "6"]) == 0
    assert lines(capsys)[0]["return"] == rows[2]["return"]
    # Another seed's starting states: another return, the same again for the same seed;
    # the run's own seed (0) is the run's own starts.
    for seed in ("3", "3", "0"):
        args = ["--logdir", str(run), "--episodes", "8", "--phases", "6", "--seed", seed]
        assert evaluate.main(args) == 0
    other, again, own = lines(capsys)
    assert other["seed"] == 3 and other["return"] != rows[2]["return"]
    assert again["return"] == other["return"] and own["return"] == rows[2]["return"]


def test_repeats_score_the_same_parameters_on_new_episodes(run, capsys):
    capsys.readouterr()
    args = ["--logdir", str(run), "--episodes", "2", "--phases", "6", "--repeats", "3"]
    assert evaluate.main(args) == 0
    rows = lines(capsys)
    assert [(row["phase"], row["repeat"], row["episodes"]) for row in rows] == [
        (6, 0, 2),
        (6, 1, 2),
        (6, 2, 2),
    ]
    # New starting states each time: the same parameters score differently.
    assert len({row["return"] for row in rows}) == 3
    assert evaluate.main(["--logdir", str(run), "--phases", "6", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err


def test_the_run_folder_given_as_the_argument_reads_as_logdir(run, capsys):
    # As `plot RUN` takes it; --logdir is the seed's flag.
    capsys.readouterr()
    args = ["--episodes", "2", "--phases", "6"]
    assert evaluate.main(["--logdir", str(run), *args]) == 0
    assert evaluate.main([str(run), *args]) == 0
    flagged, argument = lines(capsys)
    assert argument == flagged
    assert evaluate.main([str(run), "--logdir", str(run), *args]) == 0  # Once, not twice.
    assert lines(capsys) == [flagged]
    with pytest.raises(SystemExit):
        evaluate.main(args)
    assert "required: RUN (or --logdir RUN)" in capsys.readouterr().err


def test_sample_scores_sampled_actions_from_the_same_starts(run, capsys):
    capsys.readouterr()
    args = ["--logdir", str(run), "--episodes", "2", "--phases", "6"]
    assert evaluate.main(args) == 0
    (mean,) = lines(capsys)
    assert evaluate.main([*args, "--sample"]) == 0
    (sampled,) = lines(capsys)
    assert sampled["sampled"] is True and "sampled" not in mean
    assert (sampled["phase"], sampled["episodes"]) == (mean["phase"], mean["episodes"])
    # The same starting states: only the actions differ, so the returns do.
    assert sampled["return"] != mean["return"]


def test_a_run_whose_config_samples_is_scored_sampled_unless_asked_for_the_mean(
    run, tmp_path, capsys
):
    capsys.readouterr()
    args = ["--episodes", "2", "--phases", "6"]
    assert evaluate.main(["--logdir", str(run), *args]) == 0
    assert evaluate.main(["--logdir", str(run), *args, "--sample"]) == 0
    mean, sampled = lines(capsys)
    # The same run, its config set to evaluate sampled actions.
    sampling = tmp_path / run.name
    shutil.copytree(run, sampling)
    config = run_folder.read_config(sampling)
    run_folder.write_config(sampling, dataclasses.replace(config, eval_sample=True))
    assert evaluate.main(["--logdir", str(sampling), *args]) == 0
    assert evaluate.main(["--logdir", str(sampling), *args, "--mean-action"]) == 0
    by_default, asked_mean = lines(capsys)
    assert by_default["sampled"] is True and by_default["return"] == sampled["return"]
    assert "sampled" not in asked_mean and asked_mean["return"] == mean["return"]
    with pytest.raises(SystemExit):  # argparse: not allowed with argument --sample.
        evaluate.main(["--logdir", str(run), "--sample", "--mean-action"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_average_last_scores_the_mean_of_the_kept_phases_parameters(run, capsys):
    capsys.readouterr()
    args = ["--logdir", str(run), "--episodes", "2", "--phases", "6"]
    assert evaluate.main(args) == 0
    (last,) = lines(capsys)
    assert evaluate.main([*args, "--average-last", "3"]) == 0
    (averaged,) = lines(capsys)
    assert averaged["averaged"] == 3 and "averaged" not in last
    assert averaged["return"] != last["return"]  # Other parameters, the same starts.
    # Phase 5 with the two before it needs phase 3, which the run no longer keeps.
    assert evaluate.main(["--logdir", str(run), "--phases", "5", "--average-last", "3"]) == 2
    assert "--average-last 3 at phase 5 needs phases [3]" in capsys.readouterr().err
    # Every kept phase, as by default: those that have the phases before them, said so.
    assert evaluate.main(["--logdir", str(run), "--episodes", "2", "--average-last", "2"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(row["phase"], row["averaged"]) for row in rows] == [(5, 2), (6, 2)]
    assert err == (
        "evaluate: note: --average-last 2 scores phases [5, 6], whose 1 phase(s) before are "
        "kept too (phase 4 lacks [3])\n"
    )


def test_average_last_past_a_runs_first_phase_averages_the_phases_it_has(tmp_path, capsys):
    # As a two-phase run trained with average_last=3 ends: the mean of phases 1 and 2.
    run = train_run(tmp_path, "pendulum_jax", steps=160)
    capsys.readouterr()
    args = ["--logdir", str(run), "--episodes", "2", "--average-last", "3"]
    assert evaluate.main(args) == 0
    rows = lines(capsys)
    assert [(row["phase"], row["averaged"]) for row in rows] == [(1, 1), (2, 2)]
    assert evaluate.main(["--logdir", str(run), "--episodes", "2", "--phases", "2"]) == 0
    assert lines(capsys)[0]["return"] != rows[1]["return"]


@pytest.mark.slow
def test_the_normaliser_of_another_checkpoint(run, capsys):
    args = ["--logdir", str(run), "--episodes", "8", "--phases", "6", "--normalizer-from"]
    assert evaluate.main([*args, "6"]) == 0
    (own,) = lines(capsys)
    assert evaluate.main([*args, "4"]) == 0
    (swapped,) = lines(capsys)
    assert own["normalizer_from"] == 6 and swapped["normalizer_from"] == 4
    assert evaluate.main(["--logdir", str(run), "--episodes", "8", "--phases", "6"]) == 0
    assert lines(capsys)[0]["return"] == own["return"] != swapped["return"]


@pytest.mark.slow
def test_the_best_evaluated_policy_beside_a_kept_checkpoint(run, tmp_path, capsys):
    best = checkpoint.step_of(run / "checkpoints" / checkpoint.BEST)
    assert evaluate.main(["--logdir", str(run), "--episodes", "8", "--phases", "6", "--best"]) == 0
    last, kept_best = lines(capsys)
    assert (last["phase"], kept_best["phase"], kept_best["best"]) == (6, best, True)
    assert "best" not in last and kept_best["episodes"] >= 8
    # A run with no evaluated phase yet has no best policy: a one-line error.
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    (copy / "checkpoints" / checkpoint.BEST).unlink()
    assert evaluate.main(["--logdir", str(copy), "--best"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("has no best policy: no phase evaluated, or checkpoints/best.bin was removed")
    )
    # A run stopped before its first checkpoint (checkpoint_every=5) keeps its best alone.
    alone = tmp_path / "alone" / run.name
    shutil.copytree(run, alone)
    for phase in checkpoint.steps(alone / "checkpoints"):
        checkpoint.path_for(alone / "checkpoints", phase).unlink()
    assert evaluate.main(["--logdir", str(alone), "--episodes", "8", "--best"]) == 0
    assert lines(capsys) == [kept_best]  # The same policy on the same episodes.
    assert evaluate.main(["--logdir", str(alone)]) == 2
    assert capsys.readouterr().err.strip().endswith("has no checkpoint yet")


@pytest.mark.slow
def test_bad_input_is_one_line(run, tmp_path, capsys):
    for args, message in [
        (["--phases", "1"], f"no checkpoint of phase 1 in {str(run)!r}: it keeps [4, 5, 6]"),
        (["--normalizer-from", "2"], "no checkpoint of phase 2"),
        (["--episodes", "0"], "--episodes must be at least 1, got 0"),
        (["--seed", "-1"], "--seed must be a whole number in [0, 2**31), got -1"),
    ]:
        assert evaluate.main(["--logdir", str(run), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("evaluate: error: ") and message in err and "\n" not in err
    assert evaluate.main(["--logdir", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # A run without an observation normaliser: another phase's has nothing to swap in.
    unnormalised = shutil.copytree(run, tmp_path / "unnormalised")
    saved = unnormalised / "config.yaml"
    text = saved.read_text()
    assert "normalize_observations: true" in text
    saved.write_text(text.replace("normalize_observations: true", "normalize_observations: false"))
    assert evaluate.main(["--logdir", str(unnormalised), "--normalizer-from", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("trained without one (normalize_observations=False)") and "\n" not in err


@pytest.mark.slow
def test_an_env_not_found_here_is_named_in_one_line(run, tmp_path, capsys):
    # A run of an env of the user's module, evaluated where that module cannot be imported.
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    config = copy / run_folder.CONFIG
    config.write_text(config.read_text().replace("env: Pendulum-v1", "env: no_such_module:make"))
    assert evaluate.main(["--logdir", str(copy), "--phases", "6"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("evaluate: error: cannot import 'no_such_module'")
    assert "\n" not in err.strip()


def test_ctrl_c_ends_it_in_one_line_its_rows_printed(run):
    # A traceback of 57 lines, ending in the env workers' polling, and death by the signal.
    command = [sys.executable, "-m", "batchrl.scripts.evaluate", "--logdir", str(run)]
    command += ["--phases", "6", "--episodes", "2", "--repeats", "100000"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        first = json.loads(p.stdout.readline())  # Its first row: scoring, not starting.
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and err == "evaluate: interrupted\n", err
    assert first["repeat"] == 0 and all(json.loads(line)["phase"] == 6 for line in out.splitlines())


def test_rows_the_disk_cannot_take_are_one_line(run):
    # `evaluate RUN > rows.jsonl` on a full disk: a traceback from print().
    command = [sys.executable, "-m", "batchrl.scripts.evaluate", "--logdir", str(run)]
    with open("/dev/full", "w") as full:  # Every write: ENOSPC.
        done = subprocess.run(
            [*command, "--phases", "6", "--episodes", "2"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert done.stderr == "evaluate: error: cannot write its rows: No space left on device\n"


def test_a_config_edited_since_the_run_trained_is_named_as_a_resume_names_it(run, tmp_path, capsys):
    # The checkpoints' structure error named an array of the agent, not the edit.
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    config = copy / run_folder.CONFIG
    text = config.read_text()
    assert "num_envs: 2\n" in text
    config.write_text(text.replace("num_envs: 2\n", "num_envs: 3\n"))
    assert evaluate.main(["--logdir", str(copy), "--phases", "6"]) == 1
    out, err = capsys.readouterr()
    edited = f"{config} was edited since run {copy.name!r} last trained: "
    assert out == "" and err.startswith(f"evaluate: error: {edited}num_envs=3 (trained with 2)")
    config.write_text(text.replace("- 16\n", "- 8\n", 1))  # The policy's first layer.
    with pytest.raises(run_folder.RunFolderError, match=re.escape(f"{edited}policy_layers=")):
        batchrl.load(copy)


@pytest.mark.slow
def test_a_corrupt_checkpoint_is_named_in_one_line(run, tmp_path, capsys):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    (path,) = (copy / "checkpoints").glob("ckpt-*6.bin")
    with path.open("r+b") as file:
        file.truncate(1000)
    assert evaluate.main(["--logdir", str(copy), "--phases", "5", "6"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"evaluate: error: {path}: truncated") and "\n" not in err.strip()
    assert [json.loads(line)["phase"] for line in out.splitlines()] == [5]  # Kept: the rows before.


def test_a_checkpoint_the_training_run_drops_meanwhile_is_said_so(run, tmp_path, capsys):
    # Listed, then removed by the run's retention before its turn: "unreadable: No such file".
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    load = checkpoint.load

    def dropped_first(path, *args, **kwargs):  # As the run's next phase keeps a newer one.
        if path.name.startswith("ckpt-"):
            for kept in run_folder.checkpoints(copy).glob("ckpt-*"):
                kept.unlink()
        return load(path, *args, **kwargs)

    with run_folder.held(copy), pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "load", dropped_first)
        assert evaluate.main(["--logdir", str(copy), "--episodes", "2"]) == 1
    path = lambda phase: checkpoint.path_for(run_folder.checkpoints(copy), phase)  # noqa: E731
    said = "was removed as the run trains on (keep_checkpoints): evaluate its phases still kept"
    assert capsys.readouterr().err == (
        f"evaluate: note: {path(4)} {said}, or evaluate once it ends; skipped\n"
        f"evaluate: note: {path(5)} {said}, or evaluate once it ends; skipped\n"
        f"evaluate: error: {path(6)} {said}, or evaluate once it ends\n"
    )


def test_a_kept_checkpoint_that_does_not_load_costs_its_rows_not_the_others(run, tmp_path, capsys):
    # Every kept phase asked for: the first that did not load ended the command, and the
    # runs after it in a folder of seeds were never scored.
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    path = checkpoint.path_for(run_folder.checkpoints(copy), 5)
    path.write_bytes(path.read_bytes()[:1000])
    assert evaluate.main(["--logdir", str(copy), "--episodes", "2"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["phase"] for line in out.splitlines()] == [4, 6]
    assert err.startswith(f"evaluate: note: {path}: truncated") and err.endswith("; skipped\n")


def test_a_run_trained_on_a_device_this_machine_lacks_is_scored_on_its_default(
    run, tmp_path, capsys
):
    # Refused, its advice (set device=cpu) a setting evaluate takes none of.
    gpu = tmp_path / run.name
    shutil.copytree(run, gpu)
    config = (gpu / "config.yaml").read_text()
    assert "\ndevice: auto\n" in config
    (gpu / "config.yaml").write_text(config.replace("\ndevice: auto\n", "\ndevice: gpu\n"))
    capsys.readouterr()
    args = ["--episodes", "2", "--phases", "6"]
    assert evaluate.main(["--logdir", str(gpu), *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "evaluate: note: the run's device='gpu' is not here; on JAX's default\n"
    )
    assert evaluate.main(["--logdir", str(run), *args]) == 0
    assert [json.loads(captured.out)["return"]] == [row["return"] for row in lines(capsys)]


@pytest.mark.slow
def test_a_logdir_of_seeds_evaluates_each_run_as_it_alone_is_evaluated(tmp_path, capsys):
    # A `train --seeds` logdir: each seed's run, in one command, as each alone.
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
    for setting in ("num_envs=2", "update_every=2", "max_length=40", "steps=160"):
        args += ["--set", setting]
    args += ["--set", "policy_layers=16", "--set", "value_layers=16"]
    assert train.main(args) == 0
    runs = run_folder.runs_in(tmp_path)
    capsys.readouterr()
    assert evaluate.main(["--logdir", str(tmp_path), "--episodes", "2", "--best"]) == 0
    together = lines(capsys)
    assert [row["run"] for row in together] == [run.name for run in runs]
    for run in runs:
        assert evaluate.main(["--logdir", str(run), "--episodes", "2", "--best"]) == 0
    assert lines(capsys) == together
    # Run folders named one by one, and a folder of none: its one line.
    assert evaluate.main(["--logdir", *map(str, runs), "--episodes", "2", "--best"]) == 0
    assert lines(capsys) == together
    (tmp_path / "empty").mkdir()
    assert evaluate.main(["--logdir", str(tmp_path / "empty"), "--best"]) == 2
    said = f"'{tmp_path / 'empty' / 'config.yaml'}' is missing: not a batchrl run folder"
    assert capsys.readouterr().err == f"evaluate: error: {said}\n"

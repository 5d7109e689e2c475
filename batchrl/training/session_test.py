"""Tests for the session record: the commit a run was trained on, and a hand-edited config."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import yaml

import batchrl
from batchrl.scripts import train
from batchrl.training import metrics_log, run_folder, session

TINY = dict(num_envs=4, update_every=4, max_length=50, final_episodes=4, phase_steps=200)
TINY |= dict(policy_layers=(16,), value_layers=(16,))


def edit(path: pathlib.Path, **algorithm) -> str:
    """Edits config.yaml's algorithm settings as a user would, in the file; returns the text."""
    text = path.read_text()
    data = yaml.safe_load(text)
    data["algorithm"].update(algorithm)
    path.write_text(yaml.safe_dump(data))
    return text


def test_a_config_edited_by_hand_since_the_last_session_is_refused(tmp_path, capsys):
    run = batchrl.train("pendulum_jax", steps=200, logdir=tmp_path, **TINY)
    assert session.commit_of(run.rundir) == session.commit()
    config = run.rundir / run_folder.CONFIG
    rate = run.config.algorithm.learning_rate
    kept = edit(config, learning_rate=rate * 10, discount=0.9)
    said = (
        f"{config} was edited since run {run.rundir.name!r} last trained: "
        f"discount=0.9 (trained with {run.config.algorithm.discount!r}), "
        f"learning_rate={rate * 10!r} (trained with {rate!r}); put it back, or train the new "
        f"settings as a new run (--config {config})"
    )
    try:
        batchrl.resume(run.rundir, steps=400)
    except run_folder.RunFolderError as error:
        assert str(error) == said
    else:
        raise AssertionError("the edited config trained on")
    # The command says the same in one line, exit status 2, and trains nothing.
    timestamp = run.rundir.name.split("-")[0]
    argv = ["--logdir", str(tmp_path), "--timestamp", timestamp, "--set", "steps=400"]
    capsys.readouterr()
    assert train.main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"batchrl: error: {said}"
    assert len(metrics_log.read_jsonl(run_folder.metrics(run.rundir))) == 1
    # Put back, it trains on; a budget raised in the file is a resume's to give.
    config.write_text(kept)
    data = yaml.safe_load(kept)
    data["steps"] = 600
    config.write_text(yaml.safe_dump(data))
    resumed = batchrl.resume(run.rundir)
    assert [row["step"] for row in resumed.metrics] == [200, 400, 600]
    # A record of a session from before a setting existed (batchrl upgraded in between)
    # cannot say its value: the setting is not compared, and the run trains on.
    record = json.loads((run.rundir / run_folder.SESSION).read_text())
    del record["settings"]["learning_rate"]
    (run.rundir / run_folder.SESSION).write_text(json.dumps(record))
    edit(config, learning_rate=rate * 2)
    assert [row["step"] for row in batchrl.resume(run.rundir, steps=800).metrics][-1] == 800


def test_a_run_stopped_before_its_first_checkpoint_takes_a_mended_config(tmp_path):
    # Stopped in its first phase, it starts again from its start: nothing trained to keep.
    run = batchrl.train("pendulum_jax", steps=200, logdir=tmp_path, **TINY)
    for path in run_folder.checkpoints(run.rundir).iterdir():
        path.unlink()
    edit(run.rundir / run_folder.CONFIG, discount=0.9)
    resumed = batchrl.resume(run.rundir)
    assert resumed.config.algorithm.discount == 0.9
    assert [row["step"] for row in resumed.metrics] == [200]


def test_batchrl_installed_inside_another_repository_names_no_commit(tmp_path):
    # A virtual environment in a project's git repository: batchrl's files are not the
    # project's, and its commit is not batchrl's.
    project = tmp_path / "project"
    site = project / ".venv" / "lib" / "site-packages"
    shutil.copytree(pathlib.Path(batchrl.__file__).parent, site / "batchrl")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    who = ["-c", "user.name=a", "-c", "user.email=a@b"]
    commit = ["commit", "-q", "--allow-empty", "-m", "the project's"]
    subprocess.run(["git", "-C", str(project), *who, *commit], check=True)
    code = "from batchrl.training import session; print(session.__file__, session.commit())"
    env = {**os.environ, "PYTHONPATH": str(site)}
    said = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=project, capture_output=True, text=True
    )
    assert said.stdout == f"{site / 'batchrl' / 'training' / 'session.py'} None\n", said.stderr


def test_a_together_run_whose_configs_were_edited_is_refused_naming_the_first(tmp_path):
    # Both seeds' configs edited alike: they still differ in their seed alone.
    runs = batchrl.train("pendulum_jax", steps=200, seeds=[1, 2], logdir=tmp_path, **TINY)
    for run in runs:
        edit(run.rundir / run_folder.CONFIG, discount=0.9)
    try:
        batchrl.resume([run.rundir for run in runs], steps=400)
    except run_folder.RunFolderError as error:
        config = runs[0].rundir / run_folder.CONFIG
        assert str(error).startswith(f"{config} was edited since run {runs[0].rundir.name!r}")
    else:
        raise AssertionError("the edited seed trained on")
    assert [session.commit_of(run.rundir) for run in runs] == [session.commit()] * 2


def test_a_budget_raised_in_the_file_under_a_schedule_is_refused_as_set_steps_is(tmp_path):
    # The learning rate anneals over `steps`: a larger budget changes the updates trained.
    settings = dict(TINY, objective="clipped", steps_per_update=50, num_minibatches=2)
    settings["anneal_learning_rate"] = True
    del settings["update_every"]
    run = batchrl.train("pendulum_jax", steps=200, logdir=tmp_path, **settings)
    config = run.rundir / run_folder.CONFIG
    data = yaml.safe_load(config.read_text())
    data["steps"] = 400
    config.write_text(yaml.safe_dump(data))
    try:
        batchrl.resume(run.rundir)
    except run_folder.RunFolderError as error:
        assert str(error) == (
            f"{config} was edited since run {run.rundir.name!r} last trained: run "
            f"{run.rundir.name!r} sets anneal_learning_rate, a schedule over its steps=200: a "
            "larger budget would change the updates it trained; start a new run"
        )
    else:
        raise AssertionError("the raised budget trained on")

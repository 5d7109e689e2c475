import json
import pathlib

import pytest

from batchrl.scripts import train

CUE = "batchrl.testing.cue:Cue"
FRAME_CUE = "batchrl.testing.cue:FrameCue"


def final_return(logdir: pathlib.Path) -> float:
    (folder,) = logdir.iterdir()
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return rows[-1]["final/return"]


@pytest.mark.slow
def test_the_train_command_learns_a_dict_observation_by_its_discrete_leaf(tmp_path):
    # Cue pays 1 a step for the action that matches a Discrete leaf: 2.5 of 10 by chance.
    settings = [f"env={CUE}", "max_length=10", "steps=40960", "eval_episodes=64"]
    settings += ["final_episodes=64", "eval_every=2"]
    args = ["--logdir", str(tmp_path), "--config", "blackjack"]
    assert train.main([*args, *(f"--set={s}" for s in settings)]) == 0
    assert final_return(tmp_path) > 8.0


@pytest.mark.slow
def test_the_train_command_learns_a_dict_observation_by_a_few_pixels_of_its_frame(tmp_path):
    # FrameCue's uint8 frame leads with its channels, beside a vector of noise: 10 an
    # episode for the action that names the corner lit in channel 0, 2.5 by chance.
    settings = [f"env={FRAME_CUE}", "max_length=10", "steps=2048", "steps_per_update=32"]
    settings += ["learning_rate=0.001", "eval_episodes=16", "final_episodes=16"]
    args = ["--logdir", str(tmp_path), "--config", "blackjack"]
    assert train.main([*args, *(f"--set={s}" for s in settings)]) == 0
    assert final_return(tmp_path) > 8.0


def test_a_refused_space_is_one_line_and_leaves_no_run_folder(tmp_path, capsys):
    logdir = tmp_path / "runs"
    args = ["--logdir", str(logdir), "--config", "blackjack", "--set", f"env={CUE}"]
    code = train.main([*args, "--set", "env_kwargs={mission: true}"])
    error = capsys.readouterr().err
    assert code == 1
    assert error.count("\n") == 1
    assert 'obs["mission"]: Text has no fixed shape: a BatchEnv steps it, training cannot' in error
    assert not logdir.exists()

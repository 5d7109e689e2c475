import json
import pathlib

import imageio.v3 as iio
import pytest

from batchrl.scripts import train, visualize


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> pathlib.Path:
    logdir = tmp_path_factory.mktemp("runs")
    settings = [
        "num_agents=2",
        "update_every=2",
        "max_length=40",
        "eval_episodes=2",
        "steps=160",
        "policy_layers=16,16",
        "value_layers=16,16",
    ]
    args = ["--logdir", str(logdir), "--config", "pendulum_jax"]
    for setting in settings:
        args += ["--set", setting]
    assert train.main(args) == 0
    (folder,) = logdir.iterdir()
    return folder


@pytest.mark.filterwarnings("ignore:os.fork")  # Reading MP4 starts ffmpeg (fork, then exec).
def test_writes_videos_that_read_back_with_every_frame(run, tmp_path):
    out = tmp_path / "videos"
    assert visualize.main(["--logdir", str(run), "--outdir", str(out), "--episodes", "2"]) == 0
    stats = json.loads((out / "episodes.json").read_text())
    assert [row["length"] for row in stats] == [40, 40]  # The run's max_length.
    for row in stats:
        frames = iio.imread(out / row["video"])
        assert frames.shape[0] == row["length"] + 1  # The reset frame, then one per step.
        assert frames.shape[-1] == 3 and frames.std() > 0


def test_missing_run_or_checkpoint_is_one_line(tmp_path, capsys):
    assert visualize.main(["--logdir", str(tmp_path / "nope"), "--outdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "20260101T000000-pendulum_jax"
    empty.mkdir()
    (empty / "config.yaml").write_text("env_kind: jax\nmax_length: 40\n")
    assert visualize.main(["--logdir", str(empty), "--outdir", str(tmp_path)]) == 2
    assert "has no checkpoint yet" in capsys.readouterr().err

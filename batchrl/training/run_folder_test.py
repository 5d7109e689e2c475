import dataclasses
import errno
import os
import pathlib
import re
import shutil
import signal
import stat
import subprocess
import sys

import gymnasium as gym
import pytest

from batchrl import env_spec as env_spec_lib
from batchrl.configs import presets
from batchrl.envs import spaces
from batchrl.testing import cue
from batchrl.training import file_writes, run_folder


def test_a_name_splits_at_its_last_dash():
    assert (
        run_folder.name("20261122T101500", "cheetah_clipped") == "20261122T101500-cheetah_clipped"
    )
    assert run_folder.parse("2026-11-22-cheetah_clipped") == ("2026-11-22", "cheetah_clipped")
    assert run_folder.parse("seed3-blackjack") == ("seed3", "blackjack")
    assert run_folder.parse("pendulum") == ("", "pendulum")
    with pytest.raises(ValueError, match="holds letters, digits"):
        run_folder.name("seed0", "my-config")
    assert all(run_folder.name("t", name) for name in presets.PRESETS)  # No preset has "-".
    assert run_folder.safe_name("gymnasium_robotics:PointMaze_UMaze-v3") == "PointMaze_UMaze_v3"


def test_a_folders_whole_name_or_a_run_folder_as_logdir_is_said_for_what_it_is(tmp_path):
    # Both were answered "no run with timestamp ...", the slip unnamed.
    folder = run_folder.create(tmp_path, presets.get("cartpole"), "cartpole", "lay")
    with pytest.raises(run_folder.RunFolderError) as error:
        run_folder.find(tmp_path, "lay-cartpole")
    assert str(error.value) == (
        f"no run with timestamp 'lay-cartpole' in {str(tmp_path)!r} to resume; that is a run "
        "folder's name: its timestamp is 'lay'"
    )
    with pytest.raises(run_folder.RunFolderError) as error:
        run_folder.find(folder, "lay")
    assert str(error.value) == (
        f"no run with timestamp 'lay' in {str(folder)!r} to resume; {str(folder)!r} is a run "
        "folder: give the folder that holds it as --logdir"
    )


def test_a_new_folder_holds_its_config_and_never_takes_anothers(tmp_path):
    config = presets.get("cartpole")
    first = run_folder.create(tmp_path, config, "cartpole", "t0")
    assert first.name == "t0-cartpole" and run_folder.read_config(first) == config
    with pytest.raises(FileExistsError):
        run_folder.create(tmp_path, config, "cartpole", "t0")
    same_second = [run_folder.create(tmp_path, config, "cartpole") for _ in range(3)]
    assert len({folder.name for folder in same_second}) == 3
    assert all(run_folder.parse(folder.name)[1] == "cartpole" for folder in same_second)
    assert run_folder.find(tmp_path, "t0") == first
    with pytest.raises(run_folder.RunFolderError, match="no run with timestamp 't1'"):
        run_folder.find(tmp_path, "t1")
    assert not list(tmp_path.rglob("*.tmp"))
    run_folder.create(tmp_path, presets.get("cartpole_jax"), "cartpole_jax", "t0")
    with pytest.raises(run_folder.RunFolderError) as error:
        run_folder.find(tmp_path, "t0")
    assert str(error.value).endswith(
        "have timestamp 't0' ('t0-cartpole', 't0-cartpole_jax'): give the --config (and "
        "--set) that started the one to resume, or its folder "
        f"(--config {tmp_path / 't0-cartpole'})"
    )


def test_one_process_at_a_time_trains_a_folder_and_a_killed_one_frees_it(tmp_path):
    folder = run_folder.create(tmp_path, presets.get("cartpole"), "cartpole", "t0")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, sys, time; from batchrl.training import run_folder\n"
            f"with run_folder.held(pathlib.Path({str(folder)!r})):\n"
            "    print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(run_folder.RunFolderError) as error, run_folder.held(folder):
            pass
        assert str(error.value) == (
            f"run folder {str(folder)!r} is being trained by another process: "
            "let that run end (or stop it), then resume"
        )
        assert run_folder.busy(folder) and not run_folder.busy(tmp_path / "t1-cartpole")
        with pytest.raises(ValueError), run_folder.removed_if_refused([folder]):
            raise ValueError("refused")  # Another process's folder stays, however new.
        assert folder.is_dir()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert not run_folder.busy(folder)
    with run_folder.held(folder):  # The lock went with the process; no file was left.
        assert sorted(path.name for path in folder.iterdir()) == [run_folder.CONFIG]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_written_whole_take_the_mode_open_gives_them(tmp_path, umask):
    """Not the temporary file's 0600: those who may read the folder may read its files."""
    path = tmp_path / "checkpoint.bin"
    plain = tmp_path / "opened.bin"
    before = os.umask(umask)
    try:
        file_writes.write_atomic(path, b"\x00" * 8)
        plain.write_bytes(b"")
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert path.read_bytes() == b"\x00" * 8 and not list(tmp_path.glob(".*.tmp"))


def test_a_run_folder_the_command_cannot_write_is_one_line(tmp_path, monkeypatch, capsys):
    from batchrl.scripts import train

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(file_writes.tempfile, "mkstemp", refuse)
    argv = ["--config", "pendulum_jax", "--logdir", str(tmp_path), "--timestamp", "t"]
    assert train.main(argv) == 1
    error = capsys.readouterr().err
    folder = tmp_path / "t-pendulum_jax"
    assert error == (
        f"batchrl: error: cannot write '{folder / 'config.yaml'}': Permission denied; make "
        f"'{folder}' writable, then run the command again\n"
    )
    # A folder without its config, which no command resumed or started again, is not left.
    assert not folder.exists()
    monkeypatch.undo()
    assert train.main([*argv, "--set", "steps=1"]) == 0
    (tmp_path / "file").write_text("")
    with pytest.raises(run_folder.RunFolderError) as refused:
        run_folder.create(tmp_path / "file", presets.get("pendulum_jax"), "pendulum_jax")
    said = f"logdir '{tmp_path / 'file'}' is a file, not a folder of runs: give a folder"
    assert str(refused.value) == said
    monkeypatch.setattr(file_writes.tempfile, "mkstemp", refuse)
    mkdir = pathlib.Path.mkdir

    def refuse_new(path, *args, **kwargs):  # A logdir of no writes: it exists, nothing new.
        return mkdir(path, *args, **kwargs) if path.exists() else refuse()

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse_new)
    with pytest.raises(file_writes.WriteError, match=r"^cannot write '.*/t2-pendulum_jax': Perm"):
        run_folder.create(tmp_path, presets.get("pendulum_jax"), "pendulum_jax", "t2")


def test_a_folder_written_when_num_envs_was_num_agents_reads_back_the_same(tmp_path):
    config = presets.get("cartpole")
    folder = run_folder.create(tmp_path, config, "cartpole", "t0")
    path = folder / run_folder.CONFIG
    path.write_text(path.read_text().replace("\nnum_envs:", "\nnum_agents:"))
    assert "num_envs" not in path.read_text()
    assert run_folder.read_config(folder) == config


def test_numbers_in_a_hand_written_config_read_as_set_reads_them(tmp_path):
    # `1e1` was the text "1e1", handed to the env's constructor; `1e-3` a refused float.
    path = tmp_path / "mine.yaml"
    path.write_text("env: Pendulum-v1\nalgorithm: {learning_rate: 1e-3}\nenv_kwargs: {g: 1e1}\n")
    config = run_folder.read_config_file(path)
    assert config.algorithm.learning_rate == 0.001 and config.env_kwargs == {"g": 10.0}
    # Text that reads as a number is written quoted, and reads back as text.
    config = dataclasses.replace(config, env_kwargs={"name": "1e5", "g": 1e-05})
    run_folder.write_config(tmp_path, config)
    assert run_folder.read_config(tmp_path) == config


def test_a_key_given_twice_in_a_config_file_is_named_where_it_is_given_again(tmp_path):
    # PyYAML keeps the last value of a key given twice, without a word.
    path = tmp_path / "mine.yaml"
    path.write_text("env: Pendulum-v1\nseed: 1\nalgorithm: {learning_rate: 1e-3}\nseed: 2\n")
    with pytest.raises(run_folder.RunFolderError) as error:
        run_folder.read_config_file(path)
    assert str(error.value) == f"cannot read {str(path)!r}: 'seed' given twice (line 4, column 1)"


def test_unreadable_configs_are_one_line(tmp_path):
    with pytest.raises(run_folder.RunFolderError, match="does not exist"):
        run_folder.read_config(tmp_path / "nope")
    with pytest.raises(run_folder.RunFolderError, match="is missing: not a batchrl run folder"):
        run_folder.read_config(tmp_path)
    (tmp_path / run_folder.CONFIG).write_text("env: Pendulum-v1\nsteps: [1\nseed: 2\n")
    with pytest.raises(run_folder.RunFolderError, match="cannot read") as error:
        run_folder.read_config(tmp_path)
    # YAML's own error, with where it met it (it said "while parsing a flow sequence").
    assert str(error.value).endswith(
        "while parsing a flow sequence: expected ',' or ']', but got ':' (line 3, column 5)"
    )


@pytest.mark.parametrize(
    "env",
    [cue.Cue(), gym.make("Blackjack-v1"), gym.make("Pendulum-v1"), gym.make("CartPole-v1")],
    ids=["dict", "tuple", "box", "discrete"],
)
def test_the_env_spec_reads_back_equal(env, tmp_path):
    written = spaces.env_spec(env.observation_space, env.action_space)
    assert run_folder.read_spec(tmp_path) is None  # Folders from before specs were kept.
    run_folder.write_spec(tmp_path, written)
    assert run_folder.read_spec(tmp_path) == written
    assert env_spec_lib.from_data(env_spec_lib.to_data(written)) == written


def test_a_nested_tree_of_every_leaf_kind_and_a_bad_file(tmp_path):
    space = gym.spaces.Dict(
        {
            "z": gym.spaces.Tuple((gym.spaces.MultiBinary(3), gym.spaces.Discrete(5, start=2))),
            "a": gym.spaces.Box(0, 255, (8, 8, 3), "uint8"),
            "m": gym.spaces.MultiDiscrete([[2, 3], [4, 5]]),
        }
    )
    written = spaces.env_spec(space, gym.spaces.MultiDiscrete([3, 2], start=[1, 0]))
    run_folder.write_spec(tmp_path, written)
    read = run_folder.read_spec(tmp_path)
    assert read == written and list(read.observation) == list(written.observation)
    (tmp_path / run_folder.SPEC).write_text('{"observation": {"leaf": {"kind": "odd"}}}')
    with pytest.raises(run_folder.RunFolderError, match="cannot read"):
        run_folder.read_spec(tmp_path)


def test_a_run_whose_config_was_deleted_is_told_how_to_put_it_back(tmp_path, capsys):
    # "config.yaml is missing: not a batchrl run folder", of a folder holding a run.
    from batchrl.scripts import train

    command = ["--config", "pendulum_jax", "--set", "steps=4000", "num_envs=8"]
    assert train.main(["--logdir", str(tmp_path / "a"), *command, "--timestamp", "t"]) == 0
    rundir = tmp_path / "a" / "t-pendulum_jax"
    (rundir / run_folder.CONFIG).unlink()
    capsys.readouterr()
    said = (
        f"batchrl: error: '{rundir / run_folder.CONFIG}' is missing, beside the run's "
        "checkpoints: put it back (a run started with the same --config, --seed and --set "
        "writes the same file)\n"
    )
    assert train.main(["--logdir", str(tmp_path / "a"), "--timestamp", "t"]) == 2
    assert capsys.readouterr().err == said
    # With --config too, as a resume is written ("adding --timestamp T to the command that
    # started it"): "run folder ... exists already".
    assert train.main(["--logdir", str(tmp_path / "a"), *command, "--timestamp", "t"]) == 2
    assert capsys.readouterr().err == said
    # As it says: the same command's new run writes the file that resumes this one.
    assert train.main(["--logdir", str(tmp_path / "b"), *command, "--timestamp", "t"]) == 0
    shutil.copy(tmp_path / "b" / "t-pendulum_jax" / run_folder.CONFIG, rundir)
    assert train.main(["--logdir", str(tmp_path / "a"), "--timestamp", "t"]) == 0


def test_a_file_in_no_run_folder_is_told_to_give_a_run_folder(tmp_path):
    # "give its run folder" named a folder a stray file outside any run does not have.
    stray = tmp_path / "garbage.bin"
    stray.write_bytes(b"not a run")
    said = f"{str(stray)!r} is a file, not a run folder: give a run folder"
    with pytest.raises(run_folder.RunFolderError, match=f"^{re.escape(said)}$"):
        run_folder.read_config(stray)


@pytest.mark.parametrize(
    ("number", "fix"),
    [
        (errno.ENOSPC, "make room on its disk"),
        (errno.EACCES, "make '/data/run' writable"),
        (errno.EROFS, "write to a disk mounted writable, not '/data/run'"),
        (errno.ENOENT, "write to a folder that can be made, not '/data/run'"),  # Under /proc.
        (errno.EIO, "make room or make '/data/run' writable"),
    ],
)
def test_a_write_error_says_what_would_let_the_write_through(number, fix):
    # "make room" was said of a folder that could not be made, or a read-only disk.
    error = OSError(number, os.strerror(number))
    said = file_writes.write_error(pathlib.Path("/data/run/config.yaml"), error, started=False)
    assert str(said) == (
        f"cannot write '/data/run/config.yaml': {os.strerror(number)}; {fix}, then run the "
        "command again"
    )

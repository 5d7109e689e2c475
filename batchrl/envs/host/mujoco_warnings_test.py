import os
import subprocess
import sys
import warnings

import mujoco
import pytest

from batchrl.envs.host import mujoco_warnings
from batchrl.testing import mock

# Four envs in two workers, each env's first step a MuJoCo warning.
SCRIPT = """
import sys
import warnings

from batchrl.envs import BatchEnv
from batchrl.envs.host.mujoco_warnings import MujocoWarning
from batchrl.testing import mock

if sys.argv[1] == "ignore":  # At the top: the workers run it again as they start.
    warnings.filterwarnings("ignore", category=MujocoWarning)

if __name__ == "__main__":
    with BatchEnv.external(mock.UnstableEnv, num_envs=4, envs_per_worker=2) as env:
        env.reset(seed=0)
        env.step(env.action_space.sample())
"""
WARNED = "MujocoWarning: Nan, Inf or huge value in QVEL at DOF 0. The simulation is unstable."


def test_a_workers_mujoco_warnings_show_once_each_and_write_no_log_file(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    runs = {
        filters: subprocess.Popen(
            [sys.executable, "script.py", filters],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
        for filters in ("default", "ignore")
    }
    said = {filters: run.communicate(timeout=120)[1] for filters, run in runs.items()}
    assert [run.returncode for run in runs.values()] == [0, 0], said
    # MuJoCo's own printing said it once an env (4), and appended each to a log file here.
    assert said["default"].count(WARNED) == 2, said["default"]  # Once a worker.
    assert said["ignore"].count("MujocoWarning") == 0, said["ignore"]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_a_block_routes_mujoco_warnings_then_gives_the_callers_handler_back():
    env, mine = mock.UnstableEnv(), []
    env.reset()
    mujoco.set_mju_user_warning(mine.append)
    try:
        unstable = pytest.warns(mujoco_warnings.MujocoWarning, match="simulation is unstable")
        with unstable, mujoco_warnings.routed():
            env.step(0)
        assert mujoco.get_mju_user_warning() == mine.append
        env.reset()
        env.step(0)
    finally:
        mujoco.set_mju_user_warning(None)
    assert len(mine) == 1 and "simulation is unstable" in mine[0]


def test_a_filter_that_makes_it_an_error_prints_it_instead_of_raising_through_mujoco(capsys):
    env = mock.UnstableEnv()
    env.reset()
    with warnings.catch_warnings(), mujoco_warnings.routed():
        warnings.simplefilter("error", mujoco_warnings.MujocoWarning)
        env.step(0)
    assert "MujocoWarning: Nan, Inf or huge value in QVEL" in capsys.readouterr().err


def _with_mujoco_gl(value: str, *command: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUJOCO_GL": value}
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env, cwd=cwd, timeout=240
    )


def test_a_mujoco_gl_mujoco_cannot_load_fails_mujocos_envs_alone_in_one_line(tmp_path):
    # MuJoCo picks its GL backend as it loads: a value it refuses (as `osmesa` without
    # OSMesa) failed `import batchrl`, and so every command, MuJoCo's envs or not, in a
    # 33-line traceback; the fork server died of it too, so no worker env started.
    train = ["-m", "batchrl.scripts.train", "--logdir", str(tmp_path)]
    imported = _with_mujoco_gl(
        "bogus", "-c", "import batchrl, sys; print('mujoco' in sys.modules)", cwd=tmp_path
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "False", imported.stderr
    # Pendulum on worker envs, one tiny update: the fork server and its workers start.
    tiny = ["objective=clipped", "num_envs=2", "steps_per_update=32", "num_minibatches=1"]
    tiny += ["update_epochs=1", "steps=64", "max_length=50", "eval_episodes=1", "final_episodes=1"]
    pendulum = _with_mujoco_gl(
        "bogus", *train, "--config", "pendulum", "--set", *tiny, cwd=tmp_path
    )
    assert pendulum.returncode == 0, pendulum.stderr[-2000:]
    hopper = _with_mujoco_gl("bogus", *train, "--config", "hopper_clipped", cwd=tmp_path)
    assert hopper.returncode == 1 and hopper.stderr.count("\n") == 1, hopper.stderr[-2000:]
    assert "MuJoCo does not load (RuntimeError: invalid value" in hopper.stderr
    assert "MUJOCO_GL=bogus" in hopper.stderr


def test_a_builders_envs_in_this_process_warn_as_a_workers_do(tmp_path, monkeypatch):
    # HalfCheetah-v5's model sets an attribute MuJoCo deprecates: printed raw, and appended
    # to a log file in the caller's folder, where the builder made its local env itself.
    from batchrl.envs import BatchEnv

    monkeypatch.chdir(tmp_path)
    with pytest.warns(mujoco_warnings.MujocoWarning, match="settotalmass"):
        env = BatchEnv.external("HalfCheetah-v5", 1, local_envs=1)
    env.close()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()

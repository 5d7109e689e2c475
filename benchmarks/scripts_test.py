"""The benchmark scripts refuse what would make their lines wrong, before measuring."""

import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import chaos
import psutil
import pytest
import ray_training

from batchrl import conftest

HERE = pathlib.Path(__file__).parent


@pytest.mark.parametrize(
    ("script", "given", "said"),
    [
        ("core_scaling.py", ["--set", "overlap=maybe"], "unknown overlap 'maybe'"),
        ("core_scaling.py", ["--preset", "nosuch"], "unknown config 'nosuch'"),
        ("accelerator_check.py", ["--set", "foo=bar"], "pendulum_jax: unknown config key 'foo'"),
        # A whole training run, then a ZeroDivisionError, or a meaningless `together`.
        ("update_floor.py", ["--phases", "1"], "--phases must be at least 2"),
        ("update_floor.py", ["--seconds", "0"], "--seconds must be positive, got 0"),
        ("update_floor.py", ["--seeds", "-1", "--steps", "9"], "--seeds must be 2 or more"),
        ("atari_throughput.py", ["--rounds", "0"], "argument --rounds: must be a whole"),
        ("env_halves.py", ["--seconds", "0"], "argument --seconds: must be a number above 0"),
        ("ray_training.py", ["--rounds", "0"], "argument --rounds: must be a whole number"),
        ("minatar_speed.py", ["--presets", "pendulum_jax"], "argument --presets: invalid choice"),
    ],
)
def test_bad_settings_are_one_line_before_any_run(script, given, said):
    # Each core count's (each check's) child printed a traceback of 30 lines, exit 1.
    command = [sys.executable, str(HERE / script), *given]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.splitlines()[-1].startswith(f"{script}: error: {said}")


def test_ray_training_runs_each_preset_on_the_backends_its_env_has():
    fitting = {
        preset: [variant for variant in ray_training.VARIANTS if ray_training.fits(preset, variant)]
        for preset in ray_training.PRESETS
    }
    assert fitting["breakout"] == ["local_ale", "rollout_actors_ale"]
    assert (
        "local_mujoco" in fitting["cheetah_clipped"] and "local_mujoco" not in fitting["cartpole"]
    )
    assert all("ale" not in variant for variant in fitting["cartpole"] + fitting["cheetah_clipped"])


def test_seeds_together_refuses_more_runs_after_another_than_seeds():
    command = [sys.executable, str(HERE / "seeds_together.py"), "--seeds", "1"]
    # Refused before any run: a run that started would take minutes, not 60 s.
    done = subprocess.run(
        [*command, "--after-another", "2"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "seeds_together.py: error: --after-another must be 0..--seeds (1), got 2"
    )


def test_chaos_refuses_a_logdir_that_holds_its_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "cartpole-seed0-calm").mkdir()  # Would be resumed, its old result read.
    argv = ["chaos.py", "--config", "cartpole", "--logdir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit:
        chaos.main()
    assert exit.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1].endswith("holds this run already: give a new one")
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cartpole-seed0-calm"]


def test_a_gymnasium_vector_tests_line_carries_pytests_exit_code(tmp_path):
    (tmp_path / "tests" / "vector").mkdir(parents=True)  # A checkout whose tests collect none.
    command = [sys.executable, str(HERE / "gymnasium_vector_tests.py"), str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    (line,) = [json.loads(text) for text in done.stdout.splitlines()]
    assert line["pytest_exit_code"] == 5 and done.returncode == 1  # No test ran: not a pass.


def test_rl_zoo_without_the_zoo_is_one_line_and_makes_no_folder(tmp_path, monkeypatch, capsys):
    import importlib.util

    import rl_zoo

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "rl_zoo3" else found(name, *a)
    )
    monkeypatch.setattr(sys, "argv", ["rl_zoo.py", "--logdir", str(tmp_path / "zoo")])
    with pytest.raises(SystemExit) as exit:
        rl_zoo.main()
    assert exit.value.code == 2 and not (tmp_path / "zoo").exists()
    assert capsys.readouterr().err.splitlines()[-1].endswith("not installed: pip install rl_zoo3")


def test_rl_zoo_refuses_a_finished_run_of_another_budget(tmp_path, monkeypatch, capsys):
    import importlib.util

    import rl_zoo

    run = tmp_path / "seed0-Hopper-v5" / "ppo" / "Hopper-v5_1"
    (run / "Hopper-v5").mkdir(parents=True)
    (run / "Hopper-v5.zip").write_bytes(b"")  # A finished run, as the Zoo leaves it.
    (run / "Hopper-v5" / "args.yml").write_text(  # The Zoo's own layout of its arguments.
        "!!python/object/apply:collections.OrderedDict\n- - - algo\n    - ppo\n"
        "  - - n_timesteps\n    - 4096\n"
    )
    found = importlib.util.find_spec
    monkeypatch.setattr(  # The Zoo installed or not, its run's folder is all that is read.
        importlib.util, "find_spec", lambda name, *a: True if name == "rl_zoo3" else found(name, *a)
    )
    argv = ["rl_zoo.py", "--logdir", str(tmp_path), "--envs", "Hopper-v5", "--seeds", "0"]
    monkeypatch.setattr(sys, "argv", [*argv, "--steps", "1000000"])
    with pytest.raises(SystemExit) as exit:
        rl_zoo.main()
    assert str(exit.value.code) == (
        f"rl_zoo: {tmp_path / 'seed0-Hopper-v5'} finished a run of 4,096 steps, not "
        "--steps 1,000,000: give another --logdir"
    )
    assert capsys.readouterr().out == ""  # No line of the old run under the new budget.


@pytest.mark.parametrize(
    ("script", "peer", "imported_before"),
    [
        ("atari_training", "stable_baselines3", ("ale_py", "torch", "yaml")),
        ("ray_training", "ray", ()),
        ("ray_throughput", "ray", ()),
    ],
)
def test_a_missing_peer_is_one_line_naming_it_and_its_install(script, peer, imported_before):
    # The peer made unimportable, as on a machine without it. Where a package the script
    # imports before it is missing too (torch on CI's Python 3.12), that one is named.
    # The script's folder first on the path, as `python benchmarks/<script>.py` puts it.
    run = f"import runpy, sys; sys.modules[{peer!r}] = None; sys.path.insert(0, {str(HERE)!r}); "
    run += "runpy.run_path(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", run, str(HERE / f"{script}.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{script}.py ") and "pip install -e '.[" in line
    lacking = [name for name in imported_before if importlib.util.find_spec(name) is None]
    named = lacking[0] if lacking else "Ray" if peer == "ray" else peer
    assert named in line


def test_gpu_round_says_its_usage_without_a_folder_for_its_lines():
    done = subprocess.run(["bash", str(HERE / "gpu_round.sh")], capture_output=True, text=True)
    assert done.returncode != 0 and done.stdout == ""
    assert "usage: gpu_round.sh OUT [WHEELS]" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_benchmark_stopped_takes_its_train_command_with_it(tmp_path, stop):
    # `timeout` sends SIGTERM; a killed script cannot clean up, but its run, of hours, ends.
    script = subprocess.Popen(
        [sys.executable, str(HERE / "seeds_together.py"), "--seeds", "1", "--steps", "50000000"],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # Where its temporary folder goes.
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not psutil.Process(script.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # Into the train command's start: its envs, JAX, the compile.
    runs = [child.pid for child in psutil.Process(script.pid).children(recursive=True)]
    assert runs, "seeds_together.py started no train command in 120 s"
    script.send_signal(stop)
    assert script.wait(timeout=60) == (143 if stop == signal.SIGTERM else -stop)
    assert conftest.wait_gone(runs) == []
    if stop == signal.SIGTERM:  # Its temporary folder of runs removed.
        assert not [path for path in tmp_path.iterdir() if path.name.startswith("tmp")]

"""A worker's start: what the fork server imports for it."""

import importlib.machinery
import pathlib
import re
import subprocess
import sys
import types

import pytest

from batchrl.envs.host import lifecycle
from batchrl.scripts import train
from batchrl.testing import worker_start


def _cpu_seconds(command: list[str]) -> float:
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("main", [["-m", "batchrl.testing.worker_start"], [worker_start.__file__]])
def test_a_worker_does_not_import_again_what_the_main_module_imports(main):
    # The main module imports JAX, as `python -m batchrl.scripts.train` and a user's script
    # that calls `batchrl.train` do; its worker runs that module again, and once paid for
    # the import in every worker.
    worker = _cpu_seconds(main)
    importing = "import resource, batchrl.training.api; u = resource.getrusage(0)"
    imported = _cpu_seconds(["-c", f"{importing}; print(u.ru_utime + u.ru_stime)"])
    assert worker < imported / 3, (worker, imported)


def _main(monkeypatch, name: str | None, path: pathlib.Path) -> list[str]:
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(name, None) if name else None
    main.__file__ = str(path)
    monkeypatch.setitem(sys.modules, "__main__", main)
    return lifecycle.main_imports()


def test_the_fork_server_imports_what_the_main_module_imports_where_that_is_safe(
    monkeypatch, tmp_path
):
    command = pathlib.Path(train.__file__)
    assert "batchrl.training.api" in _main(monkeypatch, "batchrl.scripts.train", command)
    ray_worker = tmp_path / "ray" / "_private" / "workers" / "default_worker.py"
    ray_worker.parent.mkdir(parents=True)
    ray_worker.write_text("import argparse\nfrom ray import actor\n\nif True:\n    import jax\n")
    assert _main(monkeypatch, None, ray_worker) == ["argparse", "ray", "ray.actor"]
    # A user's script: the packages that start no thread as they are imported, not its
    # own modules, which may (an array made at import starts JAX's threads).
    user = tmp_path / "train.py"
    user.write_text("import jax\nimport mypackage.envs\nfrom batchrl.configs import TrainConfig\n")
    quiet = ["jax", "batchrl.configs", "batchrl.configs.TrainConfig"]
    assert _main(monkeypatch, None, user) == quiet
    assert _main(monkeypatch, "mypackage.train", user) == quiet
    # A command without its source (byte code only): nothing to read, nothing preloaded.
    assert _main(monkeypatch, "batchrl.scripts.train", tmp_path / "train.pyc") == []


def test_a_script_read_from_standard_input_is_told_its_workers_cannot_start():
    # Workers run the main script again from its file; `python - < script.py` has none.
    script = "from batchrl.envs import BatchEnv\nBatchEnv.external('Pendulum-v1', 2)\n"
    done = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "ValueError: worker processes run the main script again (Python's multiprocessing), "
        "but it has no file ('<stdin>'): run it from a file, or step the envs in this process "
        "(local_envs equal to num_envs)"
    )
    # Stepped here, as the line says, it runs.
    script = script.replace("2)", "2, local_envs=2).reset(seed=0)")
    run = [sys.executable, "-"]
    done = subprocess.run(run, input=script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_script_that_builds_envs_outside_its_main_guard_is_told_to_guard_them(tmp_path):
    # Each worker runs the script again as it starts: the envs built there would start
    # workers of their own, which the worker refuses, and dies before building its envs.
    body = "with BatchEnv.external('CartPole-v1', 2) as envs:\n    envs.reset(seed=0)\n"
    script = tmp_path / "script.py"
    script.write_text("from batchrl.envs import BatchEnv\n\n" + body)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert f"RuntimeError: {lifecycle.MAIN_GUARD}" in done.stderr.splitlines()
    assert done.stderr.count("Traceback") == 1  # The parent's; each worker says one line.
    assert re.fullmatch(
        r"batchrl\.envs\.host\.errors\.EnvCrashedError: env 'CartPole-v1' \(envs? [-0-9]+, worker "
        r"pid \d+\) died \(exit code 1\) during start, before it built its envs \(its error "
        rf"above\): {re.escape(lifecycle.MAIN_GUARD)}",
        done.stderr.splitlines()[-1],
    )
    # Under the guard, as the line says, it runs.
    guarded = 'if __name__ == "__main__":\n' + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    script.write_text("from batchrl.envs import BatchEnv\n\n" + guarded)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]

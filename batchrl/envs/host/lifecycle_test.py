"""A worker's start: what the fork server imports for it."""

import importlib.machinery
import pathlib
import subprocess
import sys
import types

import pytest

from batchrl.envs.host import lifecycle
from batchrl.scripts import train


def _cpu_seconds(code: str) -> float:
    done = subprocess.run([sys.executable, *code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.slow
def test_a_worker_under_a_batchrl_command_does_not_import_the_commands_modules_again():
    # The main module imports JAX, as `python -m batchrl.scripts.train` does; its worker
    # runs that module again, and once paid for the import in every worker.
    worker = _cpu_seconds(["-m", "batchrl.testing.worker_start"])
    importing = "import resource, batchrl.training.api; u = resource.getrusage(0)"
    imported = _cpu_seconds(["-c", f"{importing}; print(u.ru_utime + u.ru_stime)"])
    assert worker < imported / 3, (worker, imported)


def _main(monkeypatch, name: str | None, path: pathlib.Path) -> list[str]:
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(name, None) if name else None
    main.__file__ = str(path)
    monkeypatch.setitem(sys.modules, "__main__", main)
    return lifecycle.main_imports()


def test_the_fork_server_imports_what_batchrls_commands_and_rays_worker_script_import(
    monkeypatch, tmp_path
):
    command = pathlib.Path(train.__file__)
    assert "batchrl.training.api" in _main(monkeypatch, "batchrl.scripts.train", command)
    ray_worker = tmp_path / "ray" / "_private" / "workers" / "default_worker.py"
    ray_worker.parent.mkdir(parents=True)
    ray_worker.write_text("import argparse\nfrom ray import actor\n\nif True:\n    import jax\n")
    assert _main(monkeypatch, None, ray_worker) == ["argparse", "ray", "ray.actor"]
    # A user's module or script may start JAX's threads as it is imported: not preloaded.
    user = tmp_path / "train.py"
    user.write_text(command.read_text())
    assert _main(monkeypatch, "mypackage.train", user) == []
    assert _main(monkeypatch, None, user) == []
    # A command without its source (byte code only): nothing to read, nothing preloaded.
    assert _main(monkeypatch, "batchrl.scripts.train", tmp_path / "train.pyc") == []

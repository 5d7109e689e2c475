"""No module under batchrl/ imports itself back through others.

Every import statement counts, also those inside functions: an import deferred into a
function to dodge a circle is still a circle. Tests are left out; they import freely.
"""

import ast
import graphlib
import pathlib
import subprocess
import sys

import pytest

import batchrl

ROOT = pathlib.Path(batchrl.__file__).parent


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        if path.name.endswith("_test.py") or path.name == "conftest.py":
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[str]:
    """The batchrl modules `name` imports, its own enclosing packages left out."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    return {t for t in targets if t in known and t != name and not name.startswith(t + ".")}


def test_no_module_imports_itself_back_through_others():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph.get("batchrl.envs.host.batch")  # The graph holds the real imports.
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_a_cycle_is_found_where_there_is_one(tmp_path):
    package = tmp_path / "loop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from loop import b\n")
    (package / "b.py").write_text("from loop.a import f\n")
    known = {"loop.a": package / "a.py", "loop.b": package / "b.py"}
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph == {"loop.a": {"loop.b"}, "loop.b": {"loop.a"}}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()


def test_ray_is_entered_only_through_batch_env_ray_and_rollout_actors():
    """Only `BatchEnv.ray` (`batchrl.envs.builders`) and rollout actors import the Ray side.

    The rollout actor, itself built by Ray, ends with its raylet as env actors do.

    The train run reaches rollout actors by a deferred import, so it loads no Ray module
    unless asked.
    """
    known = modules()
    entering = {
        name
        for name, path in known.items()
        if not name.startswith("batchrl.envs.ray")
        and any(t.startswith("batchrl.envs.ray") for t in imported(name, path, known))
    }
    assert entering == {
        "batchrl.envs.builders",
        "batchrl.training.rollout_actors",
        "batchrl.training.rollout_actor",
    }
    ray_imports = set().union(
        *(imported(n, p, known) for n, p in known.items() if n.startswith("batchrl.envs.ray"))
    )
    assert "batchrl.envs.host.remote" in ray_imports  # The graph holds the real imports.
    assert "batchrl.envs.builders" not in ray_imports


def test_training_reaches_algorithms_through_their_protocol_only():
    known = modules()
    direct = {
        name: sorted(t for t in imported(name, path, known) if t.startswith("batchrl.ppo"))
        for name, path in known.items()
        if name.startswith("batchrl.training")
    }
    assert "batchrl.training.loop" in direct  # The graph holds the training modules.
    assert {name: found for name, found in direct.items() if found} == {}


def test_importing_batchrl_as_a_worker_does_imports_no_jax():
    code = (
        "import sys, batchrl, batchrl.envs.host.worker\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')], 'jax'\n"
        "assert batchrl.train.__module__ == 'batchrl.training.api'\n"
        "assert batchrl.load.__module__ == batchrl.Policy.__module__ == 'batchrl.training.policy'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

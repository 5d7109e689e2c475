"""The env sides' layers: host/ imports none of its extensions, jax/ nothing of the host.

`BatchEnv`'s builders in `batchrl.envs.builders` start the groups of `mujoco/`, `ray/`
and `atari/`; `host/` is beneath them all. The JAX-native side (`jax/`) stands on its
own: nothing of `host/`, its extensions, the builders or the bridge. Every import
statement of a module counts, also one deferred into a function. Tests are left out;
they import freely.
"""

import ast
import pathlib

HOST = pathlib.Path(__file__).parent / "host"
JAX_NATIVE = pathlib.Path(__file__).parent / "jax"
ABOVE_HOST = (
    "batchrl.envs.mujoco",
    "batchrl.envs.ray",
    "batchrl.envs.atari",
    "batchrl.envs.builders",
)
# `batchrl.envs` itself re-exports BatchEnv from the builders.
FROM_THE_PACKAGE = {"BatchEnv", "builders", "mujoco", "ray", "atari"}


def imports_above_host(
    path: pathlib.Path, package: str, forbidden: tuple[str, ...] = ABOVE_HOST
) -> list[str]:
    """The imports of the module at `path` (in `package`) that reach one of `forbidden`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{alias.name}" for alias in node.names]
            if base == "batchrl.envs":
                targets = [f"{base}.{a.name}" for a in node.names if a.name in FROM_THE_PACKAGE]
                targets = [t.replace(".BatchEnv", ".builders") for t in targets]
        else:
            continue
        if any(t == above or t.startswith(above + ".") for t in targets for above in forbidden):
            found.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def bad_imports(side: pathlib.Path, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """The imports of `forbidden` by the modules (not tests) under `side`, by module."""
    modules = sorted(p for p in side.rglob("*.py") if not p.name.endswith("_test.py"))
    assert len(modules) > 3  # The walk holds the side's modules.
    bad = {}
    for path in modules:
        package = ".".join(path.relative_to(side.parent.parent.parent).parent.parts)
        if found := imports_above_host(path, package, forbidden):
            bad[str(path.relative_to(side.parent.parent.parent))] = found
    return bad


def test_no_host_module_imports_mujoco_ray_atari_or_the_builders():
    bad = bad_imports(HOST, ABOVE_HOST)
    assert not bad, f"host modules import above the host side: {bad}"


def test_the_jax_native_side_imports_nothing_of_the_host_side_or_the_bridge():
    forbidden = (*ABOVE_HOST, "batchrl.envs.host", "batchrl.bridge")
    bad = bad_imports(JAX_NATIVE, forbidden)
    assert not bad, f"JAX-native modules import the host side: {bad}"


def test_an_import_above_the_host_side_is_found(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "import numpy\n"
        "from batchrl.envs.host import batch\n"
        "from batchrl.envs import BatchEnv, ExternalProcess\n"
        "def f():\n"
        "    from .. import ray\n"
        "    import batchrl.envs.mujoco.mujoco_group\n"
        "    from batchrl.envs.atari import atari_group\n"
        "    from ..builders import BatchEnv\n"
    )
    assert imports_above_host(module, "batchrl.envs.host") == [
        "line 3: from batchrl.envs import BatchEnv, ExternalProcess",
        "line 5: from .. import ray",
        "line 6: import batchrl.envs.mujoco.mujoco_group",
        "line 7: from batchrl.envs.atari import atari_group",
        "line 8: from ..builders import BatchEnv",
    ]

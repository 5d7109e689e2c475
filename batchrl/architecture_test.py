"""docs/architecture.md's map is true: every module is in it, and every path in it exists."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"


def named_paths(text: str) -> set[str]:
    """The repository paths the page names in backticks (files and folders)."""
    return set(re.findall(r"`((?:batchrl|benchmarks|examples)/[\w/.]*)`", text))


def unmapped(text: str, modules: list[str]) -> list[str]:
    """The modules that neither the page's paths nor a folder row of it name.

    A row may name a file by its bare name after a path in its folder (`locomotion.py`,
    `control.py`) or a whole folder (`batchrl/parts/`).
    """
    paths = named_paths(text)
    folders = {p for p in paths if p.endswith("/")}
    rows = {line for line in text.splitlines() if line.startswith("| `")}
    missing = []
    for module in modules:
        if module in paths or any(module.startswith(folder) for folder in folders):
            continue
        folder, name = module.rsplit("/", 1)
        if any(f"`{folder}/" in row and f"`{name}`" in row for row in rows):
            continue
        missing.append(module)
    return missing


def test_every_module_is_on_the_map():
    modules = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "batchrl").rglob("*.py")
        if not path.name.endswith("_test.py")
        and path.name != "conftest.py"
        and (path.name != "__init__.py" or path.parent.name == "batchrl")  # Packages' own.
    )
    assert len(modules) > 50  # The walk found the package.
    missing = unmapped(PAGE.read_text(), modules)
    assert not missing, f"modules missing from docs/architecture.md: {missing}"


def test_every_path_on_the_map_exists():
    gone = sorted(p for p in named_paths(PAGE.read_text()) if not (ROOT / p).exists())
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_a_module_missing_from_the_map_is_found():
    text = "| `batchrl/envs/mujoco/locomotion.py`, `control.py` | tasks |\n| `batchrl/parts/` | x |"
    modules = [
        "batchrl/envs/mujoco/locomotion.py",
        "batchrl/envs/mujoco/control.py",
        "batchrl/parts/normalizer.py",
        "batchrl/envs/mujoco/tasks.py",
    ]
    assert unmapped(text, modules) == ["batchrl/envs/mujoco/tasks.py"]

"""Every Python code block in README.md and docs/ runs as written, so none goes stale."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for number, match in enumerate(BLOCK.finditer(page.read_text())):
            found.append((f"{page.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def runs(name: str, code: str):
    """A block as a test; one that uses Ray runs in the test process of Ray's tests."""
    # Ray joins the cluster started last on the machine, which may be another test's.
    marks = [pytest.mark.xdist_group("ray")] if re.search(r"\bray\b", code) else []
    return pytest.param(name, code, marks=marks, id=name)


def test_the_pages_hold_python_blocks():
    names = [name for name, _ in blocks()]
    assert any(name.startswith("README.md") for name in names)
    assert any(name.startswith("docs/envs.md") for name in names)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), [runs(name, code) for name, code in blocks()])
def test_a_code_block_runs(name, code, tmp_path):
    # Run as a script file, as a reader would paste it: workers re-import it as __main__.
    script = tmp_path / "block.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"

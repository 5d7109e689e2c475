"""README.md and docs/ stay true: every Python code block runs as written, every relative
link reaches its file (and heading), and the results page's tables are the ones its JSON
lines make."""

import pathlib
import re
import subprocess
import sys

import pytest

from batchrl.scripts import table

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ALL_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^()\s]+)\)")


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


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(page: pathlib.Path) -> list[str]:
    """The page's relative links whose file, or heading after `#`, does not exist."""
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, heading = target.partition("#")
        linked = page.parent / path if path else page
        if not linked.exists():
            broken.append(target)
        elif heading and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.MULTILINE)
            if heading not in {anchor(h) for h in headings}:
                broken.append(target)
    return broken


def test_every_relative_link_reaches_its_file_and_heading():
    broken = {page.relative_to(ROOT): broken_links(page) for page in ALL_PAGES}
    assert {page: links for page, links in broken.items() if links} == {}
    assert (ROOT / "docs" / "results" / "archive" / "history.md") in ALL_PAGES


def test_a_broken_link_or_heading_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `second` part, here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md) [b](other.md#its-second-part-here) [c](https://example.org/x.md)\n"
        "[d](missing.md) [e](other.md#nowhere) ![f](other.md#other-page)\n"
    )
    assert broken_links(page) == ["missing.md", "other.md#nowhere"]


@pytest.mark.parametrize("page", ["results.md", "results/archive/history.md"])
def test_the_results_pages_tables_are_those_their_json_lines_make(page):
    # If this fails, run: python -m batchrl.scripts.table --update docs/PAGE
    assert table.check_page(ROOT / "docs" / page) == []

"""README.md and docs/ stay true: every Python code block runs as written, every relative
link reaches its file (and heading), and the results page's tables are the ones its JSON
lines make."""

import os
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
PATH = re.compile(r"[\w./-]+\.\w+")
HEX_RUN = re.compile(r"(?<![0-9a-z])[0-9a-f]{7,40}(?![0-9a-z])")


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


# The two pages a newcomer reads whole stay short; detail moves to docs/ and history.
LONGEST = {"README.md": 150, "docs/benchmarks.md": 300}


@pytest.mark.parametrize("page", sorted(LONGEST))
def test_a_reference_page_stays_short(page):
    lines = len((ROOT / page).read_text().splitlines())
    assert lines <= LONGEST[page], f"{page} has {lines} lines, at most {LONGEST[page]}"


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
    # The local Ray a block starts runs its workers at nice 15, where the suite's other
    # test process starved their start past its 120 s; the cluster fixture's run at 0.
    env = {**os.environ, "RAY_worker_niceness": "0"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
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


def cited_files(pages: list[pathlib.Path], root: pathlib.Path) -> set[pathlib.Path]:
    """The files the pages link or name by path, relative to the page's folder or to root."""
    cited = set()
    for page in pages:
        for token in set(PATH.findall(page.read_text())):
            for base in (page.parent, root):
                path = (base / token).resolve()
                if path.is_file():
                    cited.add(path)
    return cited


def unaccounted(folder: pathlib.Path, pages: list[pathlib.Path], root: pathlib.Path) -> list[str]:
    """Under folder: each data file (all but .md) no page cites, each name with a commit hash.

    A commit hash is a run of 7 to 40 hex digits, one of them a decimal digit, standing
    apart from other letters and digits (`clipped_207cd74.jsonl`, `8172291_clipped.jsonl`).
    """
    cited = cited_files(pages, root)
    found = []
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(root)
        if any(re.search(r"\d", run) for run in HEX_RUN.findall(path.name.lower())):
            found.append(f"{name}: a commit hash in its name")
        if path.is_file() and path.suffix != ".md" and path.resolve() not in cited:
            found.append(f"{name}: cited by no page")
    return found


def test_every_results_file_is_cited_and_named_without_a_commit():
    # Link a new file from its study's README.md; a commit goes in its lines' "commit" field.
    found = unaccounted(ROOT / "docs" / "results", ALL_PAGES, ROOT)
    assert not found, "\n".join(found)


def test_an_uncited_file_or_a_commit_in_a_name_is_found(tmp_path):
    study = tmp_path / "docs" / "results" / "study"
    study.mkdir(parents=True)
    for name in ["linked.jsonl", "named.png", "stray.jsonl", "clipped_207cd74.jsonl"]:
        (study / name).write_text("{}\n")
    (study / "seed100_e16").mkdir()
    (study / "seed100_e16" / "8172291_run.csv").write_text("\n")
    (study / "README.md").write_text(
        "[a](linked.jsonl) [b](clipped_207cd74.jsonl) and, by path from the root,\n"
        "`docs/results/study/named.png` and docs/results/study/seed100_e16/8172291_run.csv.\n"
    )
    assert unaccounted(tmp_path / "docs" / "results", [study / "README.md"], tmp_path) == [
        "docs/results/study/clipped_207cd74.jsonl: a commit hash in its name",
        "docs/results/study/seed100_e16/8172291_run.csv: a commit hash in its name",
        "docs/results/study/stray.jsonl: cited by no page",
    ]


@pytest.mark.parametrize("page", ["results.md", "results/archive/history.md"])
def test_the_results_pages_tables_are_those_their_json_lines_make(page):
    # If this fails, run: python -m batchrl.scripts.table --update docs/PAGE
    assert table.check_page(ROOT / "docs" / page) == []


def typed_tables(page: pathlib.Path) -> list[int]:
    """The numbers of a page's table lines that lie in no `<!-- table: -->` block."""
    lines = page.read_text().splitlines(keepends=True)
    made = {i for block in table.blocks(page, lines) for i in range(block.start + 1, block.end)}
    return [i + 1 for i, line in enumerate(lines) if line.startswith("|") and i not in made]


def test_the_benchmarks_pages_tables_are_those_their_json_lines_make():
    # If this fails, run: python -m batchrl.scripts.table --update docs/benchmarks.md
    page = ROOT / "docs" / "benchmarks.md"
    assert table.blocks(page, page.read_text().splitlines(keepends=True))
    assert table.check_page(page) == []
    assert typed_tables(page) == []


def unlinked_data(folder: pathlib.Path, pages: list[pathlib.Path]) -> list[str]:
    """The files under `folder`, Markdown aside, that no relative link of `pages` reaches."""
    linked = set()
    for page in pages:
        for target in LINK.findall(page.read_text()):
            path = target.partition("#")[0]
            if path and not re.match(r"[a-z]+:", path):
                linked.add((page.parent / path).resolve())
    files = (f for f in sorted(folder.rglob("*")) if f.is_file() and f.suffix != ".md")
    return [str(f.relative_to(folder)) for f in files if f.resolve() not in linked]


def test_every_benchmarks_data_file_is_linked_from_a_page():
    assert unlinked_data(ROOT / "docs" / "benchmarks", ALL_PAGES) == []


def test_a_typed_table_and_an_unlinked_data_file_are_found(tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("linked.jsonl", "unlinked.jsonl", "notes.md"):
        (tmp_path / "data" / name).write_text('{"run": 1}\n')
    page = tmp_path / "page.md"
    page.write_text(
        "[a](data/linked.jsonl#x) [b](https://example.org/data/unlinked.jsonl)\n\n"
        "<!-- table: data/linked.jsonl --columns run -->\n| run |\n| ---: |\n| 1 |\n"
        "<!-- end table -->\n\n| typed |\n| --- |\n"
    )
    assert unlinked_data(tmp_path / "data", [page]) == ["unlinked.jsonl"]
    assert typed_tables(page) == [9, 10]
    assert table.check_page(page) == []

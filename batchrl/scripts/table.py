"""The docs' tables, made from JSON lines rather than typed.

One row per preset (per preset and settings, where runs of one preset's name were
trained with other settings: `variants`; "on X" where not on its own env): its seeds,
the IQM of the final policies' returns with a 95 % bootstrap interval, the worst seed,
both as fractions of the best published PPO (`stats.TARGETS`), the same for the kept
best policies where the sweep evaluated them (`sweep --evaluate-best`), and the commit
the runs' code was on (a run folder's `session.json`; runs trained before folders and
sweeps recorded it, or outside a git checkout, say "not recorded"). The interval's
bootstrap draws from a fixed seed, so the same lines make the same table.

    python -m batchrl.scripts.table runs/heldout/results.jsonl [more.jsonl ...]
    python -m batchrl.scripts.table runs/heldout      # run folders, as `stats` reads them

prints the table in Markdown (`--seeds`: every seed's final return). `--update PAGE`
rewrites every block of a page that reads

    <!-- table: results/heldout/reacher_clipped.jsonl results/heldout/clipped.jsonl -->
    (the table, written here)
    <!-- end table -->

with the table of the files it names (relative to the page's folder; `reps=N` among
them sets the bootstrap's resamples, 10,000 otherwise; the word `seeds` makes instead the
table of every seed's final return, a column per seed) and leaves the rest of the page
as it is. `--check PAGE` changes nothing and names the blocks whose table their files
no longer give, exiting with 1 if there are any:

    python -m batchrl.scripts.table --update docs/results.md
    python -m batchrl.scripts.table --check docs/results.md

Any other JSON lines, a benchmark's, make a table of chosen fields with `--columns`: a
row per line, or with `--rows FIELD` a row per element of the list FIELD holds (the
line's own fields beside the element's); with `--where PATH=VALUE`, only the rows where
one of them holds (VALUE as JSON writes it, a string bare). A column reads
`[HEADER=]VALUE[/VALUE][:FORMAT]`, its header the text before a `=` (else the VALUE):

    python -m batchrl.scripts.table docs/benchmarks/env_halves.jsonl --rows results \
        --columns backend 'halves / serial=halves_over_serial:.2f'

A VALUE is a dotted path into the row (`steps_per_sec.mujoco_batch`), perhaps a slice of
its list (`env_steps_per_sec[1:]`), perhaps inside `mean(...)`; two divided make a ratio.
FORMAT is a format spec (`,.0f`, `.1%`) or a string with `{}` (`{:.2f}x`, `` `{}` ``).
A list is written element by element, `[]` as "none", a missing value as a blank cell,
a whole number with thousands' commas, any other value as JSON holds it. A block whose
words hold `--columns` is such a table, its words the command's, quoted as a shell would:

    <!-- table: benchmarks/env_halves.jsonl --rows results --columns backend halves_over_serial -->
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import shlex
import sys
from collections.abc import Callable, Sequence

from batchrl.scripts import columns, command_line, json_lines, run_lines, stats, variants
from batchrl.training import file_writes

HEADER = (
    "| preset | seeds | final IQM [95 % CI] | worst final | kept IQM | worst kept | target "
    "| commit |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
)
REPS = 10_000
START = re.compile(r"<!-- table: (?P<spec>.*) -->")
END = "<!-- end table -->"


def _number(value: float) -> str:
    """A return as the page writes it: thousands with commas, small ones with two decimals."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _seeds(seeds: Sequence[int]) -> str:
    """Seeds as a range when they are consecutive: `100-109`, else listed."""
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _with_fraction(value: float, target: float | None) -> str:
    if target is None:
        return _number(value)
    return f"{_number(value)} ({float(stats.fraction(value, target)):.2f})"


def _short(commit: str | None) -> str:
    """A commit as the page names it: 7 hex digits (and "-dirty"), "not recorded" if none."""
    found = commit and re.fullmatch(r"([0-9a-f]{7})[0-9a-f]*(-dirty)?", commit)
    return found.group(1) + (found.group(2) or "") if found else commit or "not recorded"


def row(
    config: str,
    final: dict[int, float],
    kept: dict[int, float] | None,
    reps: int,
    commits: Sequence[str | None],
    task: str | None,
    env: str | None = None,
) -> str:
    """The table's line of one preset from its seeds' final (and kept best) returns.

    `task`: the task its scores are held to (`stats.tasks`), None for none with a target;
    `env`: the env it trained where not its preset's (`stats.env_apart`).
    """
    target = stats.TARGETS.get(task) if task else None
    summary = stats.summarize(final, target, reps)
    low, high = summary["iqm_95ci"]
    named = stats.task_of(config)  # A preset trained on another env says which.
    elsewhere = f" on {task}" if task and task != named else f" on {env}" if env else ""
    cells = [
        f"`{config}`{elsewhere}",
        _seeds(summary["seeds"]),
        f"{_with_fraction(summary['iqm'], target)} [{_number(low)}, {_number(high)}]",
        _with_fraction(summary["worst"], target),
    ]
    if kept and set(kept) == set(final):
        kept_summary = stats.summarize(kept, target, reps)
        cells += [
            _with_fraction(kept_summary["iqm"], target),
            _with_fraction(kept_summary["worst"], target),
        ]
    else:
        cells += ["", ""]
    cells.append(_number(target) if target is not None else "")
    cells.append(", ".join(sorted({_short(commit) for commit in commits})))
    return "| " + " | ".join(cells) + " |"


def _commits(
    paths: Sequence[pathlib.Path], name: Callable[[dict], str]
) -> dict[str, list[str | None]]:
    """The commit of each finished run's line, by run name (None where the line has none).

    A run listed twice counts its last line, as `stats.read` does: the commit is that one's.
    """
    by_run: dict[tuple[str, int], str | None] = {}
    for _, record in run_lines.finished(paths):
        by_run[name(record), int(record["seed"])] = record.get("commit")
    commits: dict[str, list[str | None]] = {}
    for (config, _), commit in by_run.items():
        commits.setdefault(config, []).append(commit)
    return commits


NOISE_HEADER = (
    "| preset | seeds | episodes | within (same parameters) | between seeds | ratio | commit |",
    "| --- | --- | ---: | ---: | ---: | ---: | --- |",
)


def _records(paths: Sequence[pathlib.Path]) -> list[dict]:
    """Every JSON line of the files, or of the runs in the folders (`run_lines.records`)."""
    return [record for path in paths for _, record in run_lines.records(path)]


def noise_table(records: Sequence[dict]) -> str:
    """The table of `benchmarks/evaluation_noise.py` lines: one row per preset and episode count."""
    lines = list(NOISE_HEADER)
    for record in records:
        seeds = sorted(int(seed) for seed in record["scores"])
        cells = [
            f"`{record['config']}`",
            _seeds(seeds),
            str(record["episodes"]),
            _number(record["within_std"]),
            _number(record["between_std"]),
            f"{record['ratio']:.2f}",
            _short(record.get("commit")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seeds_table(final: dict[str, dict[int, float]]) -> str:
    """Every seed's final return, a row per preset and a column per seed (blank: not run)."""
    seeds = sorted({seed for returns in final.values() for seed in returns})
    lines = [
        "| final return, seed | " + " | ".join(map(str, seeds)) + " |",
        "| --- |" + " ---: |" * len(seeds),
    ]
    for config, returns in final.items():
        cells = [_number(returns[seed]) if seed in returns else "" for seed in seeds]
        lines.append(f"| `{config}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def folder_error(paths: Sequence[pathlib.Path]) -> str | None:
    """The error for a folder named where `--columns` reads JSON lines, or None.

    Said with the file to give instead, not as the OS's "[Errno 21] Is a directory".
    """
    for path in paths:
        if path.is_dir():
            inside = path / "results.jsonl"
            give = f"give {inside}" if inside.is_file() else "give a file of JSON lines"
            return f"--columns reads files of JSON lines: {path} is a folder; {give}"
    return None


def table(paths: Sequence[pathlib.Path], reps: int = REPS, per_seed: bool = False) -> str:
    """The Markdown table of every preset in the JSON lines at `paths`, in order of appearance.

    Lines of `benchmarks/evaluation_noise.py` make its table (`noise_table`) instead;
    `per_seed` makes the table of every seed's final return (`seeds_table`).
    """
    records = _records(paths)
    if records and all(r.get("benchmark") == "evaluation_noise" for r in records):
        return noise_table(records)
    name = variants.namer(record for _, record in run_lines.finished(paths))
    final = stats.read(paths, "final", name)
    if not final:
        raise ValueError(
            f"no finished run in {', '.join(map(str, paths))}: a table reads a sweep's "
            "results.jsonl (--columns reads any JSON lines)"
        )
    if per_seed:
        return seeds_table(final)
    # A config's kept columns where each of its seeds was evaluated again: a sweep run on
    # to a raised budget with --evaluate-best keeps the lower budget's lines without.
    kept = {
        config: seeds
        for config, seeds in stats.read(paths, "kept", name, lacking=True).items()
        if seeds.keys() == final.get(config, {}).keys()
    }
    commits = _commits(paths, name)
    task = stats.tasks(paths, name)
    env = stats.tasks(paths, name, stats.env_apart)
    lines = list(HEADER)
    lines += [row(c, final[c], kept.get(c), reps, commits[c], task[c], env[c]) for c in final]
    return "\n".join(lines)


class _BlockParser(argparse.ArgumentParser):
    """The command's options for a block's words: a bad one is a ValueError, not an exit."""

    def error(self, message: str):
        raise ValueError(message)


def _add_column_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--columns", nargs="+", help="[HEADER=]VALUE[/VALUE][:FORMAT] each")
    parser.add_argument("--rows", metavar="FIELD", help="a row per element of this list")
    parser.add_argument(
        "--where", action="append", default=[], metavar="PATH=VALUE", help="rows to keep (any)"
    )


@dataclasses.dataclass(frozen=True)
class Block:
    """A page's generated table: where it opens and ends among the page's lines, what it names."""

    start: int  # The index of the `<!-- table: ... -->` line; the table follows it.
    end: int  # The index of the `<!-- end table -->` line.
    spec: str

    def made(self, folder: pathlib.Path) -> str:
        """The table the block's words make: a table of chosen fields if they hold `--columns`."""
        words = shlex.split(self.spec)
        if "--columns" not in words:
            return table(*self.files(folder))
        parser = _BlockParser(prog="<!-- table: -->", add_help=False)
        parser.add_argument("paths", nargs="+")
        _add_column_options(parser)
        args = parser.parse_args(words)
        return columns.columns_table(
            [folder / p for p in args.paths], args.columns, args.rows, args.where
        )

    def files(self, folder: pathlib.Path) -> tuple[list[pathlib.Path], int, bool]:
        """The JSON lines the block names (relative to the page's folder), resamples, per seed."""
        paths, reps, per_seed = [], REPS, False
        for word in self.spec.split():
            if word == "seeds":
                per_seed = True
            elif word.startswith("reps="):
                reps = int(word[len("reps=") :]) if word[len("reps=") :].isdecimal() else 0
                if reps < 1:
                    raise ValueError(f"{word!r}: reps must be a positive whole number")
            elif word in ("--rows", "--where"):  # As the command says it, not "no file --rows".
                raise ValueError(f"{word} chooses the rows of a table of --columns; none is given")
            elif "=" in word or word.startswith("--"):
                raise ValueError(f"{word!r}: a table block takes file names, seeds and reps=N only")
            else:
                paths.append(folder / word)
        if not paths:
            raise ValueError(f"<!-- table: {self.spec} --> names no JSON lines")
        return paths, reps, per_seed


def blocks(page: pathlib.Path, lines: Sequence[str]) -> list[Block]:
    """Every table block of a page's lines (as `str.splitlines(keepends=True)` gives them)."""
    found, opened = [], None
    for index, line in enumerate(lines):
        start = START.fullmatch(line.strip())
        if start and opened is not None:
            raise ValueError(f"{page}:{index + 1}: a table block opens inside another")
        if start:
            opened = (index, start["spec"])
        elif line.strip() == END and opened is None:
            raise ValueError(f"{page}:{index + 1}: {END} closes no table block")
        elif line.strip() == END:
            found.append(Block(opened[0], index, opened[1]))
            opened = None
    if opened is not None:
        raise ValueError(f"{page}:{opened[0] + 1}: a table block with no {END}")
    return found


def _refreshed(page: pathlib.Path) -> tuple[str, list[str]]:
    """The page with every block's table made again, and the blocks that changed."""
    lines = page.read_text().splitlines(keepends=True)
    stale = []
    for block in reversed(blocks(page, lines)):
        try:
            made = block.made(page.parent) + "\n"
        except (OSError, ValueError) as error:
            raise ValueError(f"{page}:{block.start + 1}: {error}") from None
        if "".join(lines[block.start + 1 : block.end]) != made:
            stale.append(f"{page}:{block.start + 1}: <!-- table: {block.spec} -->")
            lines[block.start + 1 : block.end] = [made]
    return "".join(lines), stale[::-1]


def check_page(page: pathlib.Path) -> list[str]:
    """The blocks of `page` whose table is not the one their JSON lines make, named by line."""
    return _refreshed(page)[1]


def update_page(page: pathlib.Path) -> list[str]:
    """Writes every block's table from its JSON lines, the rest of the page as it was."""
    text, stale = _refreshed(page)
    if stale:
        file_writes.write_atomic(page, text)  # A page whole or as it was, never a part.
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.ArgumentParser(
        prog="python -m batchrl.scripts.table", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=pathlib.Path,
        help="a sweep's JSON lines or folder, run folders, or a folder of run folders",
    )
    parser.add_argument(
        "--reps", type=int, default=REPS, help=f"bootstrap resamples (default: {REPS})"
    )
    parser.add_argument("--seeds", action="store_true", help="every seed's final return instead")
    _add_column_options(parser)
    page = parser.add_mutually_exclusive_group()
    page.add_argument("--update", type=pathlib.Path, metavar="PAGE", help="rewrite its tables")
    page.add_argument("--check", type=pathlib.Path, metavar="PAGE", help="name stale tables")
    args = parser.parse_args(argv)
    if args.reps < 1:  # scipy's bootstrap would say it without naming --reps.
        parser.error(f"--reps must be at least 1, got {args.reps}")
    if bool(args.paths) == bool(args.update or args.check):
        both = "not both" if args.paths else "none was given"
        taken = [c for c in args.columns or [] if not args.paths and os.path.exists(c)]
        both += f" ({taken[0]!r} was read as a column: end --columns with --)" if taken else ""
        parser.error(f"give either JSON lines or --update/--check PAGE, {both}")
    if (args.rows or args.where) and not args.columns:
        parser.error("--rows and --where choose the rows of a table of --columns")
    if args.columns and (args.seeds or not args.paths):
        parser.error("--columns makes a table of JSON lines named here, not --seeds or a page's")
    if args.columns and folder_error(args.paths):
        parser.error(folder_error(args.paths))
    files = [path / "results.jsonl" if path.is_dir() else path for path in args.paths]
    try:
        for where in json_lines.cut(files):
            print(f"table: note: {where} was cut short while written; left out", file=sys.stderr)
        # Runs counted once, and those left out unfinished, as `stats` says them.
        notes = run_lines.unfinished(args.paths) + run_lines.replaced(args.paths)
        for note in [] if args.columns else notes:
            print(f"table: note: {note}", file=sys.stderr)
        if args.paths and args.columns:
            print(columns.columns_table(args.paths, args.columns, args.rows, args.where))
            return 0
        if args.paths:
            print(table(args.paths, args.reps, per_seed=args.seeds))
            return 0
        stale = update_page(args.update) if args.update else check_page(args.check)
    except (OSError, ValueError) as error:
        print(f"table: error: {error}", file=sys.stderr)
        return 2
    for block in stale:
        print(f"{'updated' if args.update else 'stale'}: {block}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

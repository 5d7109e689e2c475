"""The results page's headline table, made from a sweep's JSON lines rather than typed.

One row per preset: its seeds, the IQM of the final policies' returns with a 95 %
bootstrap interval, the worst seed, both as fractions of the best published PPO
(`stats.TARGETS`), and the same for the kept best policies where the sweep evaluated
them (`sweep --evaluate-best`). Prints Markdown; the page pastes it under the command.

    python -m batchrl.scripts.table runs/heldout/results.jsonl [more.jsonl ...]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from batchrl.scripts import stats

HEADER = (
    "| preset | seeds | final IQM [95 % CI] | worst final | kept IQM | worst kept | target |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
)


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


def row(config: str, final: dict[int, float], kept: dict[int, float] | None, reps: int) -> str:
    """The table's line of one preset from its seeds' final (and kept best) returns."""
    task = stats.task_of(config)
    target = stats.TARGETS.get(task) if task else None
    summary = stats.summarize(final, target, reps)
    low, high = summary["iqm_95ci"]
    cells = [
        f"`{config}`",
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
    return "| " + " | ".join(cells) + " |"


def table(paths: Sequence[pathlib.Path], reps: int = 10_000) -> str:
    """The Markdown table of every preset in the JSON lines at `paths`, in order of appearance."""
    final = stats.read(paths, "final")
    try:
        kept = stats.read(paths, "kept")
    except ValueError:  # Some runs were not evaluated again: no kept columns for them.
        kept = {}
    lines = list(HEADER)
    lines += [row(config, final[config], kept.get(config), reps) for config in final]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=pathlib.Path, help="sweep JSON lines")
    parser.add_argument("--reps", type=int, default=10_000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    try:
        print(table(args.paths, args.reps))
    except (OSError, ValueError) as error:
        print(f"table: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

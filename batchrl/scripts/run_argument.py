"""The run folder a script reads: its argument (`evaluate RUN`, as `plot RUN`) or `--logdir`.

`--logdir` is the seed's flag and stays; a run folder given as the argument, as the
other scripts take theirs, reads the same.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, what: str, many: bool
) -> argparse.Namespace:
    """`parser`'s arguments with RUN and `--logdir` added, both `what` (several where `many`).

    The run folders given either way come back as `logdir`: a list where `many`, else one.
    """
    parser.add_argument("runs", nargs="*", metavar="RUN", help=f"{what} (or give --logdir)")
    parser.add_argument("--logdir", nargs="+" if many else None, help=f"{what}, as RUN")
    args = parser.parse_args(argv)
    given = [*args.runs, *([] if args.logdir is None else _listed(args.logdir))]
    given = list(dict.fromkeys(given))  # A folder named twice (RUN and --logdir RUN): once.
    if not given:
        parser.error("the following arguments are required: RUN (or --logdir RUN)")
    if not many and len(given) > 1:
        parser.error(f"one run folder at a time, got {len(given)}: {' '.join(given)}")
    args.logdir = given if many else given[0]
    del args.runs
    return args


def _listed(logdir: str | list[str]) -> list[str]:
    return list(logdir) if isinstance(logdir, list) else [logdir]

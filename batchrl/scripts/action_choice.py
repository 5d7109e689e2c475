"""`--sample` and `--mean-action`: how `evaluate` and `visualize` choose the policy's actions.

A run evaluates with its mean action (the mode), or with sampled actions where its config
sets `eval_sample` (the Atari presets: a mean-action Breakout policy may never press FIRE
again); either command may choose the other, with the same two flags.
"""

from __future__ import annotations

import argparse


def add(parser: argparse.ArgumentParser) -> None:
    """Adds the two flags, which exclude each other."""
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument(
        "--sample",
        action="store_true",
        help="sample actions from the policy, as training does, instead of its mean action "
        "(default: as the run's eval_sample says)",
    )
    actions.add_argument(
        "--mean-action",
        action="store_true",
        help="take the policy's mean action (the mode), on a run whose eval_sample samples",
    )


def chosen(args: argparse.Namespace) -> bool | None:
    """True to sample, False for the mean action, None as the run's `eval_sample` says."""
    return True if args.sample else False if args.mean_action else None

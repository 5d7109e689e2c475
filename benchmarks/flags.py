"""Argument types of the benchmark scripts: counts and durations a line can be measured with.

A `--rounds 0` or `--seconds 0` had measured nothing and ended in a traceback
(`statistics.StatisticsError`, `ZeroDivisionError`), after minutes of setup.
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number of at least 1, or argparse's one-line error naming `text`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A number above 0 (seconds, say), or argparse's one-line error naming `text`."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # NaN too.
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}")
    return value

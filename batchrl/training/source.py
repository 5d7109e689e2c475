"""The git commit of the code running, which a run folder and a result line record.

A result is read against the code that trained it: `table` names each row's commits.
"""

from __future__ import annotations

import functools
import pathlib
import subprocess


@functools.cache
def commit() -> str | None:
    """The commit of batchrl's source, with "-dirty" when changed; None outside git.

    Asked once a process: the code a process runs is the code it imported.
    """
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        described = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return described.stdout.strip() or None

"""The JSON lines of a file, each with its line number: what `stats` and `table` read.

A sweep killed while it appends its line to results.jsonl leaves part of that line, with
no newline after it, at the file's end; the sweep skips it when it reads the file and
cuts it off before it appends (`sweep.append_line`), as `metrics_log.read_jsonl` skips a
run's cut last row. Readers of the file skip it too (`cut` names it, for the one line a
command says about it); any other line that does not parse is an error naming its file
and line.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence


def read(path: pathlib.Path) -> list[tuple[int, dict]]:
    """(line number, record) of every line of `path` but blank ones and a cut last one.

    Raises:
        ValueError: if a line that is not the cut last one does not parse.
    """
    text = path.read_text()
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                continue
            raise ValueError(f"{path}:{number} is not a JSON line") from None
    return records


def cut(paths: Sequence[pathlib.Path]) -> list[str]:
    """`FILE:LINE` of each file's last line that a write stopped part way through."""
    found = []
    for path in paths:
        text = path.read_text() if path.is_file() else ""
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            try:
                json.loads(lines[-1])
            except json.JSONDecodeError:
                found.append(f"{path}:{len(lines)}")
    return found

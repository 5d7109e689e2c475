"""The JSON lines of a file, each with its line number: what `stats` and `table` read.

A sweep killed while it appends its line to results.jsonl leaves part of that line, with
no newline after it, at the file's end; the sweep skips it when it reads the file and
cuts it off before it appends (`append`), as `metrics_log.read_jsonl` skips a
run's cut last row. Readers of the file skip it too (`cut` names it, for the one line a
command says about it); any other line that does not parse is an error naming its file
and line.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

from batchrl.training import file_writes, metrics_log


def read(path: pathlib.Path) -> list[tuple[int, dict]]:
    """(line number, record) of every line of `path` but blank ones and a cut last one.

    Raises:
        ValueError: if a line that is not the cut last one does not parse.
    """
    text = _text(path)
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


def _text(path: pathlib.Path) -> str:
    """The file's text, or a one-line ValueError for one that is not text (an image, say)."""
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a file of JSON lines: it is not text") from None


def cut(paths: Sequence[pathlib.Path]) -> list[str]:
    """`FILE:LINE` of each file's last line that a write stopped part way through."""
    found = []
    for path in paths:
        text = _text(path) if path.is_file() else ""
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            try:
                json.loads(lines[-1])
            except json.JSONDecodeError:
                found.append(f"{path}:{len(lines)}")
    return found


def append(path: pathlib.Path, line: str) -> None:
    """Appends `line` to a sweep's results file, on a line of its own after a cut last one.

    Else its line would join the cut one into one no reader parses. A file that cannot
    be written (a full disk) is a one-line `file_writes.WriteError` naming it.
    """
    try:
        metrics_log.drop_partial_line(path)
        with path.open("a") as file:
            file.write(line + "\n")
    except OSError as error:
        raise file_writes.write_error(path, error, started=False) from None


def written(path: pathlib.Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The last line of each (config, seed) in a sweep's results file (a cut last one skipped)."""
    records = metrics_log.read_jsonl(path) if path.exists() else []
    return {(record.get("config"), record.get("seed")): record for record in records}

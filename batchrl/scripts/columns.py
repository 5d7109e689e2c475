"""Markdown tables of chosen fields from any JSON lines (`table --columns`).

One row per JSON line, or per element of one of its lists (`rows`), kept where any of
`where`'s PATH=VALUE conditions holds; each column reads `[HEADER=]VALUE[/VALUE][:FORMAT]`
of its row (`Column`): a row's key of that whole name first (a run's metrics are named
`eval/return`), else the ratio. docs/benchmarks.md's tables are made so, and docs_test remakes them.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import statistics
from collections.abc import Sequence

from batchrl.scripts import json_lines

VALUE = re.compile(
    r"(?P<mean>mean\()?(?P<path>[^()\[\]/]+)(?:\[(?P<start>-?\d*):(?P<stop>-?\d*)\])?(?(mean)\))"
)

# A column's VALUE[/VALUE] runs to its first colon outside a slice's brackets; FORMAT follows.
SPEC = re.compile(r"(?P<expression>(?:[^:\[]|\[[^\]]*\])*)(?::(?P<format>.*))?", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Value:
    """What a column reads from a row: a dotted path, perhaps a slice of its list and a mean."""

    path: str
    part: slice | None = None
    mean: bool = False

    @classmethod
    def parse(cls, text: str) -> Value:
        found = VALUE.fullmatch(text.strip())
        if not found:
            raise ValueError(f"{text!r}: a value is PATH, PATH[a:b] or mean(PATH[a:b])")
        start, stop = (int(x) if x else None for x in found.group("start", "stop"))
        part = slice(start, stop) if found["start"] is not None else None
        return cls(found["path"], part, bool(found["mean"]))

    def read(self, row: dict) -> object:
        """The value in `row`, or None where a key on its path is missing."""
        value = row
        for key in self.path.split("."):
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        if self.part is not None and isinstance(value, list):
            value = value[self.part]
        if self.mean and isinstance(value, list):
            other = [x for x in value if not isinstance(x, int | float) or isinstance(x, bool)]
            if other:  # A mean of lists or strings: one line, not fmean's TypeError.
                raise ValueError(
                    f"mean({self.path}) takes a list of numbers; it holds {json.dumps(other[0])}"
                )
            value = statistics.fmean(value) if value else None
        return value


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a table of chosen fields: its header, the value or ratio, its format."""

    header: str
    values: tuple[Value, ...]  # One value, or a numerator and a denominator.
    format: str = ""
    whole: Value | None = None  # The expression as one key ("eval/return"), read first.

    @classmethod
    def parse(cls, spec: str) -> Column:
        """A column from `[HEADER=]VALUE[/VALUE][:FORMAT]`."""
        header, equals, rest = spec.partition("=")
        if not equals:
            header, rest = "", spec
        expression, form = SPEC.fullmatch(rest).group("expression", "format")
        values = tuple(Value.parse(part) for part in expression.split("/"))
        if len(values) > 2:
            raise ValueError(f"{spec!r}: a column divides at most two values")
        plain = "/" in expression and not set("()[]") & set(expression)
        whole = Value(expression.strip()) if plain else None
        return cls(header or expression, values, form or "", whole)

    def read(self, row: dict) -> object:
        """The column's value in `row`: a key of that name if the row has one, else a ratio."""
        if self.whole is not None and self.whole.read(row) is not None:
            return self.whole.read(row)
        if len(self.values) == 1:
            return self.values[0].read(row)
        top, bottom = (value.read(row) for value in self.values)
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (top, bottom))
        return top / bottom if numbers and bottom else None

    def cell(self, value: object) -> str:
        """`value` as the table writes it (a list element by element)."""
        if isinstance(value, list):
            return ", ".join(self.cell(element) for element in value) if value else "none"
        if isinstance(value, dict):
            raise ValueError(f"{self.header!r} reads a dict: name one of its keys")
        if value is None:
            text = ""
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif self.format:
            braced = "{" in self.format
            try:  # `:.2f` on a string, a lone brace: named with the column.
                text = self.format.format(value) if braced else format(value, self.format)
            except (ValueError, TypeError, IndexError, KeyError) as error:
                raise ValueError(
                    f"column {self.header!r}: format {self.format!r} does not take "
                    f"{json.dumps(value)} ({error})"
                ) from None
        else:
            text = f"{value:,}" if isinstance(value, int) else str(value)
        return text.replace("|", "\\|")


def _rows(paths: Sequence[pathlib.Path], rows: str | None, where: Sequence[str]) -> list[dict]:
    """A row per JSON line, or per element of its list at `rows`, kept if any `where` holds."""
    conditions = []
    for condition in where:
        path, equals, wanted = condition.partition("=")
        if not equals:
            raise ValueError(f"--where {condition!r}: write PATH=VALUE")
        conditions.append((Value(path), wanted))
    found = []
    for path in paths:
        for number, record in json_lines.read(path):
            items = [record] if rows is None else Value(rows).read(record)
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ValueError(f"{path}:{number}: no list of records at {rows!r}")
            for item in items:
                row = record if rows is None else {**record, **item}
                held = (_as_text(value.read(row)) == wanted for value, wanted in conditions)
                if not conditions or any(held):
                    found.append(row)
    return found


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def columns_table(
    paths: Sequence[pathlib.Path],
    columns: Sequence[str],
    rows: str | None = None,
    where: Sequence[str] = (),
) -> str:
    """The Markdown table of the chosen columns (see the module's docstring) of JSON lines.

    A column that every row lacks is an error, as a mistyped path would be; a column whose
    cells are all numbers is aligned right.
    """
    parsed = [Column.parse(spec) for spec in columns]
    found = _rows(paths, rows, where)
    if not found:
        every = _rows(paths, rows, ())
        for condition in where:
            path = condition.partition("=")[0]
            if every and all(Value(path).read(row) is None for row in every):
                raise ValueError(f"--where {condition!r}: no row has {path!r}")
        raise ValueError(f"no row in {', '.join(map(str, paths))} has what --where asks")
    values = [[column.read(row) for column in parsed] for row in found]
    lines = ["| " + " | ".join(c.header.replace("|", "\\|") for c in parsed) + " |"]
    alignment = []
    for index, column in enumerate(parsed):
        present = [row[index] for row in values if row[index] is not None]
        if not present:
            lacking = [v.path for v in column.values if all(v.read(row) is None for row in found)]
            missing = lacking[-1] if lacking else (column.whole or column.values[0]).path
            raise ValueError(f"column {column.header!r}: no row has {missing!r}")
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in present)
        alignment.append("---:" if numbers else "---")
    lines.append("| " + " | ".join(alignment) + " |")
    for row in values:
        lines.append("| " + " | ".join(c.cell(v) for c, v in zip(parsed, row, strict=True)) + " |")
    return "\n".join(lines)

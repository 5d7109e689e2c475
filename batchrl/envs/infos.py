"""Infos of a batch step, sent compactly between processes and decoded only when read.

Numeric scalar entries that every env reports (for MuJoCo tasks: all of them) travel
as one array per key instead of one pickled object per env and key, which is several
times cheaper. `Infos` is a read-only sequence of dicts that builds each dict on access,
so a training loop that ignores infos does not pay for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_PYTHON_SCALARS = (float, int, bool)


def encode(infos: Sequence[dict]) -> tuple | None:
    """A compact form of the infos of k envs: (k, columns, python_keys, rest), or None if empty."""
    if not any(infos):
        return None
    columns, python_keys = {}, []
    first = infos[0]
    for key, value in first.items():
        kind = type(value)
        numeric = kind in _PYTHON_SCALARS or (
            isinstance(value, np.generic) and value.dtype.kind in "biuf"
        )
        if not numeric or not all(key in info and type(info[key]) is kind for info in infos):
            continue
        columns[key] = np.array(
            [info[key] for info in infos], dtype=None if kind in _PYTHON_SCALARS else value.dtype
        )
        if kind in _PYTHON_SCALARS:
            python_keys.append(key)
    if len(columns) == len(first) and all(len(info) == len(first) for info in infos):
        rest = None
    else:
        rest = [{k: v for k, v in info.items() if k not in columns} for info in infos]
    return len(infos), columns, python_keys, rest


class Infos(Sequence):
    """The infos of a batch, one dict per env, built from encoded chunks when read."""

    def __init__(self, chunks: Sequence[tuple | list[dict] | None], sizes: Sequence[int]):
        self._chunks = chunks
        self._sizes = sizes
        self._starts: np.ndarray | None = None  # Computed on first read: most steps never read.
        self._cache: dict[int, dict] = {}

    def __len__(self) -> int:
        return sum(self._sizes)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"env index {index} out of range for a batch of {len(self)}")
        if index not in self._cache:
            self._cache[index] = self._decode(index)
        return self._cache[index]

    def _decode(self, index: int) -> dict:
        if self._starts is None:
            self._starts = np.cumsum([0, *self._sizes])
        chunk_index = int(np.searchsorted(self._starts, index, side="right")) - 1
        chunk, i = self._chunks[chunk_index], index - int(self._starts[chunk_index])
        if chunk is None:
            return {}
        if isinstance(chunk, list):
            return chunk[i]
        _, columns, python_keys, rest = chunk
        info = dict(rest[i]) if rest is not None else {}
        for key, column in columns.items():
            info[key] = column[i].item() if key in python_keys else column[i]
        return info

    def __repr__(self) -> str:
        return f"Infos({list(self)!r})"

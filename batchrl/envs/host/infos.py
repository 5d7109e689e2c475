"""Infos of a batch step, fetched from workers and decoded only when read.

A worker keeps a step's infos until the parent asks (`Owed`), so no batch step waits
while they are encoded and sent (encoding a step's 16 infos took 34-35 us of the
critical path; the protocol that keeps them stepped 32 HalfCheetah-v5 a median 10.6 %
faster); its answer to the step says whether they hold anything, so a step whose infos
are all empty is never asked for. When asked, numeric entries that every env reports
(scalars, or arrays of one shape; for MuJoCo tasks: all of them) travel as one array per
key instead of one pickled object per env and key, which is several times cheaper, and
Gymnasium's vector infos are built from those arrays a key at a time (`vector_infos`).
`Infos` is a read-only sequence of dicts that builds each dict on access; `Columns` is
a group's infos as such arrays, with the envs that report other dicts; `VectorInfos` is
Gymnasium's vector form of them (a dict of arrays with `_key` masks), built when first
read.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from batchrl import tricks
from batchrl.envs.host import errors

_PYTHON_SCALARS = (float, int, bool)

# Steps whose infos a worker process or a Ray actor keeps for the parent to fetch.
KEPT_STEPS = 2


def _numeric(value: Any) -> bool:
    return type(value) in _PYTHON_SCALARS or (
        isinstance(value, np.generic | np.ndarray) and value.dtype.kind in "biuf"
    )


def _alike(value: Any, first: Any) -> bool:
    """Whether `value` fits the column of `first`: its type, and an array's dtype and shape."""
    if type(value) is not type(first):
        return False
    return not isinstance(first, np.ndarray) or (
        value.dtype == first.dtype and value.shape == first.shape
    )


def encode(infos: Sequence[dict]) -> tuple | None:
    """A compact form of the infos of k envs: (k, columns, rest), or None if all are empty.

    The envs whose infos have the commonest keys and types (those of a step, beside a
    reset's) are its rows. `columns` maps each numeric key of theirs (a scalar, or an
    array of one shape) to (dtype, python scalar?, raw bytes, an array's shape or None),
    zeros in the other envs' rows; raw bytes pickle far faster than arrays. `rest` holds
    what is left per env (every key in its order, a column's marked, and the other envs'
    dicts whole), or is None when nothing is.
    """
    if not any(infos):
        return None
    signatures = [(tuple(info), tuple(map(type, info.values()))) for info in infos]
    common = collections.Counter(signatures).most_common(1)[0][0]  # First of the commonest.
    rows = [i for i, signature in enumerate(signatures) if signature == common]
    keys, kinds = common
    first = infos[rows[0]]
    columns = {}
    for key, kind, value in zip(keys, kinds, first.values(), strict=True):
        if not _numeric(value):
            continue
        if isinstance(value, np.ndarray) and not all(_alike(infos[i][key], value) for i in rows):
            continue
        python = kind in _PYTHON_SCALARS
        dtype = np.array(value).dtype if python else value.dtype
        if dtype.kind == "O":  # A Python int past int64's range: sent as it is.
            continue
        try:
            values = np.array([infos[i][key] for i in rows], dtype)
        except OverflowError:  # Another env's int past the first one's dtype.
            continue
        column = values
        if len(rows) < len(infos):
            column = np.zeros((len(infos), *values.shape[1:]), values.dtype)
            column[rows] = values
        shape = value.shape if isinstance(value, np.ndarray) else None
        columns[key] = (column.dtype.str, python, column.tobytes(), shape)
    if len(rows) == len(infos) and len(columns) == len(keys):
        rest = None
    else:  # Infos decode in their own key order: a row's columns are marked in it.
        marked = set(rows)
        rest = [
            {k: _InColumn if k in columns else v for k, v in info.items()} if i in marked else info
            for i, info in enumerate(infos)
        ]
    return len(infos), columns, rest


class _InColumn:
    """Marks, in `encode`'s `rest`, a key whose value is in its column."""


class Owed:
    """A worker's infos of one step that are still in the worker: fetched when first read.

    Most training loops never read a step's infos; keeping them in the worker until
    asked saves encoding and sending them on every step. `fetch` returns the encoded
    chunk (see `encode`); an env error it raises is kept and raised at each read.
    """

    def __init__(self, fetch: Callable[[], Any]):
        self._fetch: Callable[[], Any] | None = fetch
        self._value: Any = None
        self._error: Exception | None = None

    def fetch_now(self, fetch: Callable[[], Any] | None = None) -> None:
        """Fetches the infos now (with `fetch` instead of the usual way, if given)."""
        if self._fetch is None:
            return
        try:
            self._value = (fetch or self._fetch)()
        except errors.EnvError as error:
            self._error = error
        self._fetch = None

    def get(self) -> Any:
        """The encoded chunk."""
        self.fetch_now()
        if self._error is not None:
            raise self._error
        return self._value


class Ledger:
    """A worker's infos that the parent has not fetched, by step, while something holds them.

    Only weak references: infos nobody holds any more are never fetched.
    """

    def __init__(self):
        self._owed: dict[int, weakref.ref] = {}

    def add(self, step: int, owed: Owed) -> None:
        """Notes the infos of `step`, still in the worker."""
        self._owed[step] = weakref.ref(owed)

    def held(self, step: int) -> Owed | None:
        """The infos of `step` if they are noted and something still holds them."""
        ref = self._owed.get(step)
        return None if ref is None else ref()

    def forget(self, step: int | None = None) -> None:
        """Drops `step` (fetched), or every step (lost with the worker) when None."""
        if step is None:
            self._owed.clear()
        else:
            self._owed.pop(step, None)

    def due(self, up_to: int) -> list[tuple[int, Owed]]:
        """Drops the steps up to `up_to`; returns those still held, oldest first, to fetch."""
        held = []
        for step in sorted(self._owed):
            if step > up_to:
                break
            owed = self._owed.pop(step)()
            if owed is not None:
                held.append((step, owed))
        return held


def _cell(column: tuple, i: int) -> Any:
    """Env i's value of an encoded column: a Python or NumPy scalar, or a writable array."""
    dtype, python, data, shape = column
    dtype = np.dtype(dtype)
    if shape is None:
        value = np.frombuffer(data, dtype, 1, i * dtype.itemsize)[0]
        return value.item() if python else value
    size = math.prod(shape)
    return np.frombuffer(data, dtype, size, i * size * dtype.itemsize).reshape(shape).copy()


def _decoded(columns: dict, kept: dict, i: int) -> dict:
    """Env i's infos from its entry of `encode`'s `rest`, its columns' values filled in."""
    return {
        key: _cell(columns[key], i) if value is _InColumn else value for key, value in kept.items()
    }


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
        if isinstance(chunk, Owed):
            chunk = chunk.get()
        if chunk is None:
            return {}
        if isinstance(chunk, list):
            return chunk[i]
        if isinstance(chunk, Columns):
            return chunk.row(i)
        _, columns, rest = chunk
        if rest is None:
            return {key: _cell(column, i) for key, column in columns.items()}
        return _decoded(columns, rest[i], i)

    def __repr__(self) -> str:
        return f"Infos({list(self)!r})"

    def parts(self) -> list[tuple[int, Columns | None]]:
        """Each chunk's first env and its infos as `Columns`, or None where all are empty.

        A worker's encoded chunk and the dicts of envs in this process come back as
        columns, each env whose dict is not those columns alone (a reset's, a final
        step's) kept whole.
        """
        starts = itertools.accumulate([0, *self._sizes[:-1]])
        parts = []
        for start, chunk in zip(starts, self._chunks, strict=True):
            if isinstance(chunk, Owed):
                chunk = chunk.get()
            if isinstance(chunk, list):  # Envs stepped in this process: their dicts.
                chunk = encode(chunk)
            if isinstance(chunk, tuple):
                chunk = _columns(chunk)
            parts.append((int(start), chunk))
        return parts


def _columns(chunk: tuple) -> Columns:
    """An encoded chunk (see `encode`) as `Columns`: the envs that differ in `special`."""
    count, columns, rest = chunk
    arrays, python = {}, set()
    for key, (dtype, is_python, data, shape) in columns.items():
        arrays[key] = np.frombuffer(data, dtype).reshape(count, *(shape or ()))
        if is_python:
            python.add(key)
    special = {}
    if rest is not None:
        keys = list(columns)
        for i, kept in enumerate(rest):
            if list(kept) != keys or any(value is not _InColumn for value in kept.values()):
                special[i] = _decoded(columns, kept, i)
    return Columns(arrays, count, special, frozenset(python))


@dataclasses.dataclass(frozen=True)
class Columns:
    """The infos of `count` envs as columns: env i's value of `key` is `columns[key][i]`.

    Envs in `special` have their own dicts instead (a reset's infos, a final step's).
    Keys in `python` hold Python scalars (`.item()` of the column's). A MuJoCo batch's
    and an ale-py batch's step infos come this way, and a worker's encoded ones decode to
    it, so Gymnasium's vector infos of them are built a column at a time (`vector_infos`).
    """

    columns: dict[str, np.ndarray]
    count: int
    special: dict[int, dict] = dataclasses.field(default_factory=dict)
    python: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return self.count

    def row(self, i: int) -> dict:
        """Env i's infos."""
        if i in self.special:
            return self.special[i]
        python = self.python
        return {
            key: column[i].item() if key in python else column[i]
            for key, column in self.columns.items()
        }


_HOLDERS = (np.ndarray, dict, list, tuple)  # What an env may change after handing it out.


def owned(info: dict) -> dict:
    """`info` with its arrays copied, or `info` itself where it holds none.

    Infos are read steps later (lazy infos, a worker's kept ones), and an env may hand
    out views of its state that its next step rewrites (MuJoCo's `tendon_length`).
    """
    for value in info.values():
        if isinstance(value, _HOLDERS):
            return {key: _copied(value) for key, value in info.items()}
    return info


def _copied(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_copied(item) for item in value)
    return value


def vector_infos(build: Callable[[], dict], lazy: bool = False) -> dict:
    """The infos `build` makes: a plain dict, or built when first read where `lazy`.

    `lazy` gives a `VectorInfos`, unless that trick is off (`batchrl.tricks`, "lazy_infos").
    """
    return VectorInfos(build) if lazy_on(lazy) else build()


def lazy_on(lazy: bool) -> bool:
    """Whether infos asked for `lazy` are built lazily: unless that trick is off."""
    return lazy and tricks.on("lazy_infos")


class VectorInfos(dict):
    """Gymnasium's vector infos, a dict of arrays with `_key` masks, built when first read.

    A plain dict to whoever reads it (Gymnasium's vector wrappers check for one), but
    `build` runs only at the first read or write, so a step whose infos nobody reads
    fetches nothing from the workers. Copies and pickles are plain dicts.
    """

    def __init__(self, build: Callable[[], dict]):
        super().__init__()
        self._build: Callable[[], dict] | None = build

    def _ready(self) -> None:
        if self._build is not None:
            built = self._build()  # An error here is raised again at the next read.
            self._build = None
            dict.update(self, built)

    def __reduce__(self) -> tuple:
        return dict, (dict(self.items()),)


def _built_first(name: str) -> Callable:
    method = getattr(dict, name)

    @functools.wraps(method)
    def built_first(self: VectorInfos, *args: Any, **kwargs: Any) -> Any:
        self._ready()
        return method(self, *args, **kwargs)

    return built_first


for _name in (
    "__contains__",
    "__delitem__",
    "__eq__",
    "__getitem__",
    "__ior__",
    "__iter__",
    "__len__",
    "__ne__",
    "__or__",
    "__repr__",
    "__reversed__",
    "__ror__",
    "__setitem__",
    "clear",
    "copy",
    "get",
    "items",
    "keys",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "values",
):
    setattr(VectorInfos, _name, _built_first(_name))

"""Gymnasium's vector infos of a batch step, built a column at a time.

Gymnasium's `VectorEnv._add_info` builds them env by env and key by key: 32 Hoppers'
six keys are about 200 Python-level array writes a step, which cost
`BatchEnv.mujoco` a fifth of its steps/s. Where envs report their infos as columns (a
MuJoCo or ale-py batch's step, a worker's encoded numeric keys: `infos.Columns`), this
builds the same dict a run of envs at a time: the same keys in the same order, arrays
of the same dtypes, the same masks. Envs with dicts of their own (a reset's infos, a
final step's) go through `_add_info` in their turn, and so does any key whose array
`_add_info` would not make from the column alone (NumPy bools and other objects,
`final_obs`, a key already made with another dtype). A trick behind a fence
(`batchrl.tricks`, "column_infos"): off, every env goes through `_add_info`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from batchrl import tricks
from batchrl.envs.host import infos as infos_lib

AddInfo = Callable[[dict, dict, int], dict]  # Gymnasium's `VectorEnv._add_info`.
Places = range | np.ndarray  # Where envs' infos go in the batch's.


def vector(infos: Sequence[dict], envs: Sequence[int], num_envs: int, add_info: AddInfo) -> dict:
    """Gymnasium's vector infos of `infos`, env j's at `envs[j]` of `num_envs`.

    Equal to `add_info` applied to each non-empty info in turn, from an empty dict.
    """
    # A range (every env, in order) stays one: its runs are written as slices.
    places = envs if isinstance(envs, range) else np.asarray(envs, np.intp)
    if isinstance(infos, infos_lib.Infos) and tricks.on("column_infos"):
        parts = infos.parts()
    else:
        parts = [(0, list(infos))]
    built: dict = {}
    for start, part in parts:
        if isinstance(part, infos_lib.Columns):
            _add_columns(built, part, places[start : start + len(part)], num_envs, add_info)
        elif part is not None:
            for i, info in enumerate(part):
                if info:
                    add_info(built, info, int(places[start + i]))
    return built


def _add_columns(
    built: dict, part: infos_lib.Columns, places: Places, num_envs: int, add_info: AddInfo
) -> None:
    """Adds `part`'s infos to `built`: what env by env in their order would add.

    The specials before the first column row go first, in order. The column rows then
    go at once, a key at a time, and the specials after them in order. That equals env
    by env: the first row makes every column's array, as the first of them would, and
    from then on each env writes only its own cells (its place in each array and mask).
    Where a cell is written twice (`x`'s mask, and a key `_x`), the later key's value
    stays either way.
    """
    special = sorted(part.special)
    first = 0
    while first < len(part) and first in part.special:
        _add_special(built, part, first, places, add_info)
        first += 1
    if first == len(part):
        return
    later = [i for i in special if i > first]
    if later:
        keep = np.ones(len(part), bool)
        keep[:first] = keep[later] = False
        rows = np.flatnonzero(keep)
        index = np.asarray(places)[rows]
    else:
        rows = slice(first, len(part))
        index = places[first:]
        if isinstance(index, range):
            index = slice(index.start, index.stop, index.step)
    _add_rows(built, part, rows, index, num_envs, add_info)
    for i in later:
        _add_special(built, part, i, places, add_info)


def _add_special(
    built: dict, part: infos_lib.Columns, i: int, places: Places, add_info: AddInfo
) -> None:
    if part.special[i]:
        add_info(built, part.special[i], int(places[i]))


def _add_rows(
    built: dict,
    part: infos_lib.Columns,
    rows: slice | np.ndarray,
    index: slice | np.ndarray,
    num_envs: int,
    add_info: AddInfo,
) -> None:
    """Adds the column rows `rows` at `index` of the batch, a key at a time.

    A key at a time equals env by env: every row has the same keys in the same order,
    so each key's array is made at the first row either way. A key whose array
    `_add_info` would not make from the column alone goes through it env by env.
    """
    whole = isinstance(index, slice) and index == slice(0, num_envs, 1)  # Every env's row.
    for key, column in part.columns.items():
        dtype = None if key == "final_obs" else _made_dtype(column, key in part.python)
        array, mask = built.get(key), built.get(f"_{key}")
        fits = _fits(array, dtype, column.shape[1:], num_envs)
        if not (fits and _fits(mask, np.bool_, (), num_envs)):
            python = key in part.python
            numbers = np.arange(num_envs)[index]
            for value, place in zip(column[rows], numbers, strict=True):
                add_info(built, {key: value.item() if python else value}, int(place))
            continue
        if array is None and mask is None and whole:
            # The whole batch's first rows of `key`: a cast copy, a mask of all True.
            built[key], built[f"_{key}"] = column[rows].astype(dtype), np.ones(num_envs, np.bool_)
            continue
        if array is None:
            array = np.zeros((num_envs, *column.shape[1:]), dtype)
        if mask is None:
            mask = np.zeros(num_envs, np.bool_)
        array[index] = column[rows]
        mask[index] = True
        built[key], built[f"_{key}"] = array, mask


def _made_dtype(column: np.ndarray, python: bool) -> np.dtype | None:
    """The dtype of the array `_add_info` makes for a key first seen with a row of `column`.

    Arrays stack in their dtype; NumPy numbers and Python scalars make an array of their
    type (a Python bool a bool array); None where `_add_info` makes an object array (a
    NumPy bool), or where Python ints may not fit the int64 array (a uint64 column).
    """
    return column.dtype if column.ndim > 1 else _made_of_scalars(column.dtype, python)


@functools.cache
def _made_of_scalars(dtype: np.dtype, python: bool) -> np.dtype | None:
    """`_made_dtype` of a column of scalars: one answer per dtype, found once (every step asks)."""
    if python:  # Rows of `.item()`: a bool, int or float, whatever the column's width.
        kind = {"b": bool, "i": int, "u": int, "f": float}.get(dtype.kind)
        made = None if kind is None else np.dtype(kind)
        return made if made is not None and np.can_cast(dtype, made, "safe") else None
    scalar = dtype.type
    return np.dtype(scalar) if issubclass(scalar, np.number) else None


def _fits(array: object, dtype: np.dtype | type | None, shape: tuple, num_envs: int) -> bool:
    """Whether `array` is absent, or the array of `dtype` and `shape` rows a column can fill.

    Anything else (another dtype, a dict of nested infos) is left to `_add_info`, which
    writes into it what it would.
    """
    if dtype is None:
        return False
    if array is None:
        return True
    return (
        isinstance(array, np.ndarray) and array.dtype == dtype and array.shape == (num_envs, *shape)
    )

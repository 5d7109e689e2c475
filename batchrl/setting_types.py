"""A setting's value checked against its field's type, as a config file's values are read.

Both the run's config and the algorithm's check their fields with it as they are made,
so a value of the wrong type is one line naming the setting, wherever it came from: a
config file, `--set`, or a config built in Python (`TrainConfig(num_envs="8")` stopped
in a comparison's TypeError).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import operator
import types
import typing
from typing import Any


def typed(name: str, kind: Any, value: Any) -> Any:
    """`value` as read from YAML, checked against type `kind`; a ValueError naming both."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        try:
            return typed(name, next(a for a in args if a is not type(None)), value)
        except ValueError as error:  # YAML's None is null: `None` there is a string.
            raise ValueError(f"{error}, or null" if type(None) in args else str(error)) from None
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(typed(name, args[0], v) for v in value)
    if origin is dict:
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            return dict(value)
        raise ValueError(f"{name}={value!r}: expected a mapping such as {{key: value, ...}}")
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and not isinstance(value, bool):
        try:  # numpy's and JAX's integer scalars too (`np.arange(3)`'s seeds), as an int.
            return operator.index(value)
        except TypeError:
            pass
        # A whole number written as a float (`steps=1e6`), as `--set steps=1e6` reads it.
        if _real(value) and float(value).is_integer():
            return int(value)
    if kind is float and _real(value):  # numpy's and JAX's scalars too (`np.float32(1e-3)`).
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is str and isinstance(value, bool):  # YAML 1.1 reads on, off, yes, no as bools.
        quoted = "'on'" if value else "'off'"
        raise ValueError(f"{name}={value!r}: expected str; in a YAML file quote it: {quoted}")
    expected = getattr(kind, "__name__", str(kind))
    if origin is tuple:  # YAML has no tuples.
        expected = "a list such as [64, 64]"
    raise ValueError(f"{name}={value!r}: expected {expected}")


def _real(value: Any) -> bool:
    """Whether `value` is one real number: a Python, numpy or JAX int or float, not a bool."""
    if isinstance(value, bool | str | bytes):
        return False
    if isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    return getattr(value, "shape", None) == () and getattr(dtype, "kind", None) in ("i", "u", "f")


def type_of(kind: type, name: str) -> Any:
    """The type field `name` of dataclass `kind` is annotated with."""
    return _hints(kind)[name]


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def read_fields(record: Any, skip: tuple[str, ...] = ()) -> None:
    """Each field of frozen dataclass `record` set to its value as `typed` reads it.

    A one-line ValueError for the first of the wrong type; numpy's numbers become
    Python's (`np.uint8(2)` envs overflowed in the budget's arithmetic), lists tuples.
    """
    for field in dataclasses.fields(record):
        if field.name not in skip:
            value = getattr(record, field.name)
            read = typed(field.name, type_of(type(record), field.name), value)
            if read is not value:
                object.__setattr__(record, field.name, read)  # Frozen: only as it is made.

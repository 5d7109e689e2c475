"""The buffers a compiled train phase copies at every batch step, read from its optimised HLO.

A buffer that rides through a conditional or a host call of the step loop can be copied
by XLA at every step: the whole episode memory was, once (about 180 MB a step on a
stand-in for the seed's Humanoid, a 60k-step phase 97 s against 33-37 s without). This reads
the program XLA will run: the step loop is the innermost `while` whose body calls the host
(the bridge's callback), and every `copy` reachable from that body is listed with its size.
What the loop carries from step to step (its state: the storage among it) is listed too,
so a test can see the storage keep the env's dtypes in the program itself.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_CALLED = re.compile(
    r"(?:body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)"
)
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_WHILE_BODY = re.compile(r"\bwhile\(.*body=%?([\w.\-]+)")
_WHILE_STATE = re.compile(r"=\s*\((.*)\)\s+while\(.*body=%?([\w.\-]+)")
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_COPY = re.compile(r"=\s*(\w+)\[([\d,]*)\][^ ]*\s+copy(?:-start)?\(")
_HOST_CALL = re.compile(r"custom-call\(.*callback", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Copy:
    """An array of the program (a copy instruction's, or the step loop's state): dtype, shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def bytes(self) -> int:
        size = 1 if self.dtype == "pred" else np.dtype(_NUMPY.get(self.dtype, "f4")).itemsize
        return size * math.prod(self.shape)


_NUMPY = {"f32": "f4", "f64": "f8", "s32": "i4", "s64": "i8", "u32": "u4", "u8": "u1", "s8": "i1"}


def _computations(hlo: str) -> dict[str, list[str]]:
    computations, current = {}, None
    for line in hlo.splitlines():
        header = _HEADER.match(line)
        if header and not line.startswith(" "):
            current = computations.setdefault(header.group(1), [])
        elif current is not None and line.startswith(" "):
            current.append(line)
    return computations


def _callees(lines: list[str]) -> set[str]:
    called = set()
    for line in lines:
        called.update(_CALLED.findall(line))
        for group in _BRANCHES.findall(line):
            called.update(name.strip().lstrip("%") for name in group.split(","))
    return called


def _reachable(computations: dict[str, list[str]], root: str) -> set[str]:
    seen, stack = set(), [root]
    while stack:
        name = stack.pop()
        if name in seen or name not in computations:
            continue
        seen.add(name)
        stack.extend(_callees(computations[name]))
    return seen


def _step_loops(computations: dict[str, list[str]]) -> dict[str, set[str]]:
    """The innermost loop bodies that call the host, each with what it reaches."""
    bodies = {
        body: _reachable(computations, body)
        for lines in computations.values()
        for line in lines
        for body in _WHILE_BODY.findall(line)
    }
    calling = {
        body: reach
        for body, reach in bodies.items()
        if any(_HOST_CALL.search(line) for name in reach for line in computations[name])
    }
    if not calling:
        raise ValueError("no loop of this program calls the host")
    return {
        body: reach
        for body, reach in calling.items()
        if not any(other in reach for other in calling if other != body)
    }


def per_step(hlo: str) -> list[Copy]:
    """The copies in the step loop of a program that calls the host; ValueError if none does."""
    computations = _computations(hlo)
    copies = []
    for reach in _step_loops(computations).values():
        for name in reach:
            for line in computations[name]:
                for dtype, dims in _COPY.findall(line):
                    shape = tuple(int(d) for d in dims.split(",") if d)
                    copies.append(Copy(dtype, shape))
    return copies


def carried(hlo: str) -> list[Copy]:
    """The arrays the step loop carries from one batch step to the next; ValueError if none."""
    computations = _computations(hlo)
    loops = _step_loops(computations)
    state = []
    for lines in computations.values():
        for line in lines:
            found = _WHILE_STATE.search(line)
            if found and found.group(2) in loops:
                for dtype, dims in _ARRAY.findall(found.group(1)):
                    state.append(Copy(dtype, tuple(int(d) for d in dims.split(",") if d)))
    return state


def largest(hlo: str) -> int:
    """Bytes of the largest buffer the step loop copies (0 when it copies none)."""
    return max((copy.bytes for copy in per_step(hlo)), default=0)

"""Tricks: the performance tricks that bend a library, each with the switch that turns it off.

A trick lives in one module, named in docs/architecture.md's table ("Tricks behind a
fence") with the benchmark that justifies it. `BATCHRL_TRICKS_OFF`
turns tricks off by name, comma-separated, or all of them with "all": to check that a
result does not hang on one, or to run on where a new version of the library it bends
breaks it. Each trick asks `on` where it applies (compiled ones when they are traced),
so set the variable before the run starts; the tests run once with each trick off.
"""

from __future__ import annotations

import functools
import os

VARIABLE = "BATCHRL_TRICKS_OFF"
TRICKS = {
    "one_block": "bridge/one_block.py: a step's pure work as one conditional between host calls",
    "thread_state": "bridge/thread_state.py: Python's state of XLA's calling thread kept alive",
    "conv_matmul": "networks/conv_matmul.py: convolutions as patches and one product on CPU",
    "lazy_infos": "envs/host/infos.py: vector infos built at their first read (VectorInfos)",
    "column_infos": "envs/host/vector_infos.py: Gymnasium's vector infos built a column at a time",
    "hidden_torch": "training/metrics_log.py: tensorboardX imported with torch hidden",
}


def on(name: str) -> bool:
    """Whether trick `name` is on: not named in `BATCHRL_TRICKS_OFF` (nor "all" there)."""
    if name not in TRICKS:
        raise ValueError(f"unknown trick {name!r}: one of {tuple(TRICKS)}")
    return not _off(os.environ.get(VARIABLE, "")) & {name, "all"}


@functools.cache
def _off(value: str) -> frozenset[str]:
    """The tricks `value`, the variable's text, turns off; parsed once per text."""
    off = frozenset(part.strip() for part in value.split(",") if part.strip())
    unknown = sorted(off - {*TRICKS, "all"})
    if unknown:
        raise ValueError(f"{VARIABLE} names unknown tricks {unknown}: use {tuple(TRICKS)} or all")
    return off

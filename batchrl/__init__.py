"""batchrl: efficient batched reinforcement learning in JAX.

`batchrl.train` trains a config into a `Run`, `batchrl.resume` a run folder further;
`batchrl.load` reads a run folder's `Policy` (`batchrl/training/api.py`, `run.py`,
`policy.py`). They are imported on
first use, so importing batchrl, as every env worker process does, imports no JAX;
`batchrl.configs` (the presets, `TrainConfig`) too.
"""

import importlib
from typing import Any

from batchrl import envs

_PUBLIC = {
    "train": "batchrl.training.api",
    "resume": "batchrl.training.api",
    "Run": "batchrl.training.run",
    "load": "batchrl.training.policy",
    "Policy": "batchrl.training.policy",
}

__all__ = ["Policy", "Run", "configs", "envs", "load", "resume", "train"]


def __getattr__(name: str) -> Any:
    if name == "configs":
        return importlib.import_module("batchrl.configs")
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'batchrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and those imported on first use, for `dir` and tab completion."""
    return sorted({*globals(), *__all__})

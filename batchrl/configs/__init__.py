"""Presets: one function per task, each a frozen `TrainConfig`; `get(name)` and `PRESETS`."""

from batchrl.configs.overrides import parse_override, parse_overrides
from batchrl.configs.presets import PRESETS, get
from batchrl.configs.train_config import TrainConfig, flat, from_dict, replace, to_dict

__all__ = [
    "PRESETS",
    "TrainConfig",
    "flat",
    "from_dict",
    "get",
    "parse_override",
    "parse_overrides",
    "replace",
    "to_dict",
]

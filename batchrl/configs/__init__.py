"""Presets: one function per task, each a frozen `TrainConfig`; `get(name)` and `PRESETS`."""

from batchrl.configs.presets import PRESETS, get
from batchrl.configs.train_config import TrainConfig, from_dict, parse_override, to_dict

__all__ = ["PRESETS", "TrainConfig", "from_dict", "get", "parse_override", "to_dict"]

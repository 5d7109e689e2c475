"""Leaves of runs saved before their state changed, read as the state holds them now.

- An unbounded image's observation statistics: None in runs saved before 2026-12-04,
  which left such images unnormalised; the statistics begin at the resume, as a new run's.
- Observations of a `Box` of 64-bit integers: int32 (and wrapped past 2**31) in runs saved
  before 2026-12-04; they load as the float32 that compiled code now holds them in.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np

logger = logging.getLogger("batchrl.training")
NOT_OLDER = object()  # What `read` returns for a leaf saved as the state holds it now.


def read(saved: Any, target: Any, path: str) -> Any:
    """`saved`, an older run's leaf at `path`, as `target` holds it; else NOT_OLDER."""
    if saved is None and isinstance(target, dict) and "/obs_norm" in path:
        logger.warning("checkpoint holds no statistics at %s: they begin at this resume", path)
        return target
    if (
        "obs" in path
        and isinstance(saved, np.ndarray)
        and isinstance(target, jax.Array | np.ndarray)
        and saved.dtype == np.int32
        and target.dtype == np.float32
        and saved.shape == target.shape
    ):
        widened = saved.astype(np.float32)
        return jax.device_put(widened) if isinstance(target, jax.Array) else widened
    return NOT_OLDER

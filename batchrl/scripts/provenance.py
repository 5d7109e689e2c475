"""Where a result was measured: the machine, its versions, and the code's commit.

Every JSON line a sweep or a benchmark prints carries them, so that lines measured on
different machines or commits are not compared as one.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform
from typing import Any

from batchrl.training import session


def machine() -> dict[str, Any]:
    """The machine and versions a result was measured with."""
    model = "unknown"
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {"python": platform.python_version()}
    for package in ("batchrl", "jax", "gymnasium", "mujoco"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    # The cores this process may run on (taskset, a container's CPU set), not the machine's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "cpu": model, "versions": versions}


def source_commit() -> str | None:
    """The git commit of the code running, with "-dirty" when changed; None outside git."""
    return session.commit()

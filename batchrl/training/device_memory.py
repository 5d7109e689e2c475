"""How much memory an agent's storage takes, and whether it fits where it will live.

The rollout buffer or episode memory is the largest array of a run (a 1,000-step
episode memory of 90 slots of 348 floats is over 100 MB); it is measured from its
shapes before anything is allocated, printed at start, and a storage larger than the
free memory of its device is refused with one line rather than failing deep in XLA.
"""

from __future__ import annotations

import re
from typing import Any

import jax

from batchrl.training import host_memory


def nbytes(tree: Any) -> int:
    """Bytes of the arrays in `tree` (arrays or `jax.ShapeDtypeStruct`s), each array once.

    Seeds built together share one storage array (`together_memory.one_storage`).
    """
    leaves = {id(leaf): leaf for leaf in jax.tree.leaves(tree)}
    return sum(leaf.size * leaf.dtype.itemsize for leaf in leaves.values())


def human(count: int) -> str:
    """Bytes as a short reading: 512 B, 3.4 MiB, 1.2 GiB."""
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"


def available(device: jax.Device) -> int | None:
    """Free bytes for arrays on `device`; None where they cannot be read.

    On an accelerator, its memory limit less what is in use; on the CPU, free RAM, or
    the room under the process's cgroup memory limit where that is less.
    """
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return host_memory.free_bytes()


def check_fits(storage_bytes: int, what: str, device: jax.Device | None = None) -> None:
    """Raises a one-line MemoryError when `storage_bytes` exceed the device's free memory."""
    device = device or jax.local_devices()[0]
    free = available(device)
    if free is not None and storage_bytes > free:
        raise MemoryError(
            f"the {what} takes {human(storage_bytes)}, more than the {human(free)} free on "
            f"{device.platform}; lower num_envs, max_length, update_every or steps_per_update"
        )


def out_of_memory(error: BaseException) -> str | None:
    """One line for XLA's failed allocation, naming its size and what to lower; else None.

    XLA says it in a runtime error (`RESOURCE_EXHAUSTED: Out of memory while trying to
    allocate N bytes` on a GPU, `... Out of memory allocating N bytes.` on the CPU).
    """
    first = str(error).partition("\n")[0]
    found = re.search(r"Out of memory (?:while trying to allocate|allocating) (\d+) bytes", first)
    if not isinstance(error, RuntimeError) or (found is None and "RESOURCE_EXHAUSTED" not in first):
        return None
    size = f" {human(int(found[1]))}" if found else ""
    return (
        f"out of memory allocating{size} on the device: lower num_envs, policy_layers, "
        "value_layers, max_length, update_every or steps_per_update, or train fewer seeds together"
    )

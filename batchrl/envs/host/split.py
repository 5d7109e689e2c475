"""How a batch's envs split over worker processes and the parent, by the cores there are."""

from __future__ import annotations

import math
import os


def cores() -> int:
    """The cores this process may run on."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, count or 1)


def first_core_to_pin(threads: int) -> int:
    """The first of `threads` consecutive cores to pin threads to, one each; -1: none.

    Only where the threads take every core this process may run on, numbered in a row:
    pinned to some cores of many, they would crowd the cores that other runs pin to.
    """
    if not hasattr(os, "sched_getaffinity"):
        return -1
    allowed = sorted(os.sched_getaffinity(0))
    if threads != len(allowed) or allowed[-1] - allowed[0] != threads - 1:
        return -1
    return allowed[0]


def default_envs_per_worker(num_envs: int, parent_steps: bool = False) -> int:
    """Envs split evenly over one worker per core (one core fewer when the parent steps envs).

    The fastest setting measured: more, smaller workers pay more wake-ups per step.
    """
    workers = max(1, cores() - 1) if parent_steps else cores()
    return max(1, math.ceil(num_envs / workers))


def default_local_envs(num_envs: int) -> int:
    """The parent's even share of the batch when it steps envs beside one worker per other core."""
    return num_envs // cores() if cores() > 1 else 0

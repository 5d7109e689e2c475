"""Shared test fixtures: every test must leave no child process behind."""

from __future__ import annotations

import time

import psutil
import pytest

# multiprocessing's own helpers: one per parent, they exit when the parent does.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def live_children() -> list[psutil.Process]:
    """This process's running descendants (zombies and multiprocessing's helpers excluded)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and not any(h in command for h in _HELPERS):
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(pids: list[int], seconds: float = 3.0) -> list[int]:
    """Waits until none of `pids` runs; returns those still running after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        running = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    running.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def no_orphans():
    """Fails a test that leaves a worker process running after it ends."""
    before = {p.pid for p in live_children()}
    yield
    left = wait_gone([p.pid for p in live_children() if p.pid not in before])
    assert not left, f"test left processes running: {left}"

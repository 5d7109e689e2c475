"""Waiting on a worker's pipes: spin while spinning catches what comes, block otherwise.

Both sides of a worker's pipes wait on each other every step: the parent for the
worker's answer, the worker for the next command. What they wait for usually comes
within a millisecond (a small env's step; a small batch's policy), and a process that
polls without blocking catches it sooner than one the kernel must wake: 32 HalfCheetah-v5
on 2 cores step at 34.7k env-steps/s polling, 30.1k blocking. Where it comes later (a
slow env, a policy that waits for a core, the pause of an update) spinning catches
nothing and takes a core from the processes that do the work: a worker that spun 2 ms
for each command of a run whose policy step takes longer burnt 2 ms of a core a step.
So a `Poller` spins before its next wait only if its last wait ended within the spin.

The kernel checks a poll's fds one after another, so one check can miss what was written
first and see what was written after: a worker writes its step's answer, then the
step's infos on its command pipe, and a parent preempted between its checks of the two
saw only the infos (`answered a step out of turn`, once in a benchmark's run). What is
ready stays ready until read, so a `Poller`, given its fds in the order they are written,
checks all at once again when it saw some but not the first (not on a step's answer).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Iterator

BLOCK_SLICE = 0.25  # Seconds; the longest a pending signal waits (see `Poller.poll`).
# An fd every Poller's waits also end on, and what they call when it is readable (`watching`).
_watch: tuple[int, Callable[[], None]] | None = None


@contextlib.contextmanager
def watching(fd: int, on_ready: Callable[[], None]) -> Iterator[None]:
    """Every `Poller`'s waits in the block also end when `fd` is readable, calling `on_ready`.

    A run's wakeup fd for Ctrl-C (`training.run_signals`): a wait on a worker in a thread
    of XLA's, where Python takes no signals, learns of one at once. `on_ready` must read
    `fd` empty (or a wait would wake at once again) and may raise, ending the wait.
    """
    global _watch
    before, _watch = _watch, (fd, on_ready)
    try:
        yield
    finally:
        _watch = before


def hear() -> None:
    """Calls `watching`'s `on_ready` now if its fd is readable: for a wait on no pipe.

    The MuJoCo batch steps in its C threads and waits on no worker; it asks here each
    step, so that a Ctrl-C in its phase is answered at once too (a poll of one fd,
    microseconds, against a batch step's milliseconds).
    """
    if _watch is not None:
        fd, on_ready = _watch
        if select.select([fd], [], [], 0)[0]:
            on_ready()


class Poller:
    """`select.poll` over `fds` that polls without blocking for up to `spin` s, then blocks.

    It spins only while spinning pays: after a wait that ended within `spin` seconds
    (the first wait spins). Polling yields the core between polls. `fds` come in the
    order their writers write them (an answer before the infos that follow it, a message
    before its writer's exit): a wait's events then hold every fd written before one seen.
    """

    def __init__(self, spin: float, *fds: int) -> None:
        self.spin = spin
        self._poller = select.poll()
        for fd in fds:
            self._poller.register(fd, select.POLLIN)
        self._first = fds[0]
        self._spinning = spin > 0
        self._watched: tuple[int, Callable[[], None]] | None = None  # `watching`'s, registered.

    @property
    def spinning(self) -> bool:
        """Whether the next wait spins before it blocks."""
        return self._spinning

    def poll(self, timeout: float | None = None) -> list:
        """The events, waiting at most `timeout` seconds (None: forever); [] when none came.

        Blocks in slices of `BLOCK_SLICE`: a signal the kernel gives to another of the
        process's threads (Ctrl-C on a BLAS or XLA thread) does not interrupt this
        thread's wait; Python raises it between slices.
        """
        if self._watched is not _watch:
            self._follow_watch()
        watched = self._watched is not None  # A watch's fd to take out of what comes.
        start = time.perf_counter()
        events = []
        if self._spinning:
            end = start + self.spin
            while True:
                events = self._poller.poll(0)
                if events and watched:
                    events = self._ready(events)
                if events or time.perf_counter() >= end:
                    break
                os.sched_yield()
        deadline = None if timeout is None else start + timeout
        while not events:
            left = BLOCK_SLICE if deadline is None else deadline - time.perf_counter()
            events = self._poller.poll(max(0, math.ceil(min(left, BLOCK_SLICE) * 1000)))
            if events and watched:
                events = self._ready(events)
            if deadline is not None and time.perf_counter() >= deadline:
                break
        self._spinning = self.spin > 0 and time.perf_counter() - start <= self.spin
        if events and all(fd != self._first for fd, _ in events):
            again = self._poller.poll(0)  # Those written before the ones seen, too.
            events = (self._ready(again) if watched else again) or events
        return events

    def _follow_watch(self) -> None:
        """Waits on `watching`'s fd from now on, and no longer on one it left."""
        if self._watched is not None:
            self._poller.unregister(self._watched[0])
        self._watched = _watch
        if _watch is not None:
            self._poller.register(_watch[0], select.POLLIN)

    def _ready(self, events: list) -> list:
        """`events` less the watched fd's, whose `on_ready` it calls (which may raise)."""
        fd, on_ready = self._watched
        for ready, _ in events:
            if ready == fd:
                on_ready()
                return [(other, event) for other, event in events if other != fd]
        return events

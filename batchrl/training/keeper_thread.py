"""KeeperThread: a run keeps each phase (its row, checkpoint, best) while the next one trains.

A phase's checkpoint is serialised, hashed, written and fsynced: 40-160 ms for the
`breakout` preset's 20 MB on 2 cores (`benchmarks/between_phases.py`), up to a quarter
of a phase at the 16.7k env steps/s of a GPU. On the training thread every phase would
wait for it. Here `Keeper.record` runs on a thread of its own, one phase at a time and
in order, while the next phase trains: the state is JAX arrays (a together-run's, host
copies made for the record), which nothing changes in place, so the thread reads the
phase's own. What reads the records waits for them first (`wait`): the final phase's
tail of parameters, a callback, an interrupt's checkpoint, the run's end. A record that
failed (a full disk) raises in the training thread at the next `record` or `wait`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from batchrl.training.keeper import Keeper


class KeeperThread:
    """`keeper`'s records, one in flight at most, on a thread of their own.

    A context manager: leaving it waits for the record in flight, and raises nothing of
    the record's (an error that leaves it stays the one raised). Leave it before the
    run's signal handlers (`run_signals.signals_kept`) go: a SIGTERM in its wait would
    otherwise end the process there.
    """

    def __init__(self, keeper: Keeper):
        self.keeper = keeper
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batchrl-keeper")
        self._pending: concurrent.futures.Future | None = None

    def record(self, state: Any, metrics: dict[str, float]) -> None:
        """Keeps a phase as `Keeper.record` does, once the one before is kept."""
        self.wait()
        self._pending = self._pool.submit(self.keeper.record, state, metrics)

    def wait(self) -> None:
        """Returns once every phase given is kept; raises what its record raised."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None  # Only once kept: after a wait cut short, `close` waits on.

    def close(self) -> None:
        """Waits for the record in flight and ends the thread; `wait` raises what it raised.

        A KeyboardInterrupt in the wait (a second Ctrl-C) waits on, then is raised: the
        record runs on regardless, and the keeper must not close its files, nor the
        interrupt's checkpoint be written, beside it. (It waits on the record, not on
        the thread: Python 3.11's join, cut by a signal, takes a live thread for ended.)
        """
        interrupted = None
        while self._pending is not None and not self._pending.done():
            try:
                concurrent.futures.wait([self._pending])
            except KeyboardInterrupt as error:
                interrupted = error
        self._pool.shutdown(wait=False)  # Its thread ends on its own, nothing left to run.
        if interrupted is not None:
            raise interrupted

    def __enter__(self) -> KeeperThread:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def wait_all(threads: Sequence[KeeperThread]) -> None:
    """Returns once every thread's phases are kept (a together-run's seeds'); raises an error."""
    for thread in threads:
        thread.wait()

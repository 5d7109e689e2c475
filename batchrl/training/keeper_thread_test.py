"""A run keeps each phase on a thread of its own while the next one trains."""

import signal
import sys
import threading
import time

import pytest

import batchrl
from batchrl.training import checkpoint, file_writes, loop
from batchrl.training.api_test import TINY_PENALTY
from batchrl.training.keeper_thread import KeeperThread

# 200 env steps a phase (4 envs, one update of 4 episodes of 50 steps).
PHASES = dict(steps=600, **TINY_PENALTY)


def test_a_phases_checkpoint_is_written_while_the_next_phase_trains(tmp_path, monkeypatch):
    started, calls, seen = threading.Event(), [], []
    real_phase, real_save = loop.run_phase, checkpoint.save

    def phase(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # The second phase begins: the first's save waits for it.
            started.set()
        return real_phase(*args, **kwargs)

    def save(directory, step, *args, **kwargs):
        seen.append(step)
        # On the training thread, the next phase would never start: False after 60 s.
        if step == 1:
            seen.append(started.wait(timeout=60))
        return real_save(directory, step, *args, **kwargs)

    monkeypatch.setattr(loop, "run_phase", phase)
    monkeypatch.setattr(checkpoint, "save", save)
    run = batchrl.train("pendulum_jax", logdir=tmp_path, **PHASES)
    assert seen == [1, True, 2, 3]
    assert checkpoint.steps(run.rundir / "checkpoints") == [1, 2, 3]
    assert [row["step"] for row in run.metrics] == [200, 400, 600]


def test_a_failed_write_of_a_phase_stops_the_run_with_its_error(tmp_path, monkeypatch):
    real_save = checkpoint.save

    def save(directory, step, *args, **kwargs):
        if step == 2:
            raise file_writes.WriteError(f"cannot write '{directory}': No space left on device")
        return real_save(directory, step, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", save)
    with pytest.raises(file_writes.WriteError, match=r"^cannot write '.*': No space left"):
        batchrl.train("pendulum_jax", logdir=tmp_path, **PHASES)
    (folder,) = tmp_path.iterdir()
    assert checkpoint.steps(folder / "checkpoints") == [1]  # The last good one stays.


def waiting_in_close(frame) -> bool:
    """Whether `frame` (a thread's innermost) is inside `KeeperThread.close`."""
    while frame is not None:
        if frame.f_code is KeeperThread.close.__code__:
            return True
        frame = frame.f_back
    return False


class InterruptedKeeper:
    """Keeps a phase as a second Ctrl-C comes, once the training thread waits for it."""

    def __init__(self):
        self.kept = []

    def record(self, state, metrics):
        main = threading.main_thread().ident
        deadline = time.monotonic() + 60
        while not waiting_in_close(sys._current_frames().get(main)):
            assert time.monotonic() < deadline, "the training thread never waited in close"
            time.sleep(0.01)
        signal.pthread_kill(main, signal.SIGINT)  # Cuts the wait short, as a second Ctrl-C.
        time.sleep(0.2)  # The record goes on after it, as a large checkpoint's write.
        self.kept.append(state)


def test_a_ctrl_c_in_the_wait_for_the_last_record_is_raised_once_it_is_kept():
    keeper = InterruptedKeeper()
    thread = KeeperThread(keeper)
    thread.record(7, {})
    with pytest.raises(KeyboardInterrupt):
        thread.close()
    assert keeper.kept == [7]  # Kept before the interrupt went on: nothing writes beside it.

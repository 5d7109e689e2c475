"""The cores a batch splits over are those this process may run on, not the machine's."""

import contextlib
import os

from batchrl.envs.host import split


@contextlib.contextmanager
def one_core():
    """Runs the body pinned to one CPU, as `taskset -c` or a container's CPU set would.

    The affinity is the calling thread's, and threads started in the body inherit it.
    """
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def test_cores_follow_the_affinity():
    assert split.cores() == len(os.sched_getaffinity(0))
    with one_core():
        assert split.cores() == 1
        # One worker for the batch, and the parent steps none beside it.
        assert split.default_envs_per_worker(8) == 8
        assert split.default_local_envs(8) == 0


def test_threads_are_pinned_only_where_they_take_every_core_in_a_row(monkeypatch):
    # A process allowed cores 2 and 3 (`taskset -c 2,3`): two threads pin from core 2.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 2})
    assert split.first_core_to_pin(2) == 2
    # Fewer threads than cores: pinned, they would crowd the cores other runs pin to.
    assert split.first_core_to_pin(1) == -1
    assert split.first_core_to_pin(3) == -1
    # Cores not in a row: ale-py and EnvPool pin from an offset, to cores in a row.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2})
    assert split.first_core_to_pin(2) == -1

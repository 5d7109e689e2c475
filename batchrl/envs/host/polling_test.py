import os
import subprocess
import sys
import threading
import time

import numpy as np
import psutil

from batchrl.envs import BatchEnv
from batchrl.envs.host import polling


def _pipe_written_every(seconds: float, times: int) -> tuple[int, threading.Thread]:
    """A pipe's read end, and the thread that writes a byte to it every `seconds`."""
    read, write = os.pipe()

    def writer() -> None:
        for _ in range(times):
            time.sleep(seconds)
            os.write(write, b"x")
        os.close(write)

    thread = threading.Thread(target=writer)
    thread.start()
    return read, thread


def test_a_poller_whose_waits_outlast_its_spin_blocks_instead():
    # Thirty waits of 10 ms with a spin of 5 ms: spinning each time would take 150 ms of
    # this thread's CPU; after the first wait it blocks.
    read, writer = _pipe_written_every(0.01, 30)
    poller = polling.Poller(0.005, read)
    start = time.thread_time()
    for _ in range(30):
        assert poller.poll(timeout=5)
        os.read(read, 1)
    spent = time.thread_time() - start
    writer.join()
    os.close(read)
    assert spent < 0.05


def test_a_poller_spins_again_once_a_wait_ends_within_its_spin():
    read, write = os.pipe()
    poller = polling.Poller(0.1, read)
    assert poller.spinning  # The first wait spins.
    assert poller.poll(timeout=0.2) == []  # 0.2 s with nothing: the next wait blocks.
    start = time.thread_time()
    assert poller.poll(timeout=0.2) == []
    assert time.thread_time() - start < 0.05
    assert not poller.spinning
    os.write(write, b"x")
    assert poller.poll(timeout=1)  # At once: the next wait spins first.
    assert poller.spinning
    os.close(read)
    os.close(write)


# A process that, for each byte read on the fd given first, writes one byte on each of
# the two others, in turn: as a worker writes its answer, then its infos.
_ANSWERER = """
import os, sys
bell, first, second = map(int, sys.argv[1:])
while os.read(bell, 1):
    os.write(first, b"a")
    os.write(second, b"i")
"""


def test_what_was_written_first_is_seen_with_what_was_written_after():
    # Before, one wait in about 50,000 saw the second fd ready and not the first, which
    # the kernel had checked before the writes: a step's infos taken for a stray message.
    bell_read, bell = os.pipe()
    first, first_write = os.pipe()
    second, second_write = os.pipe()
    fds = (bell_read, first_write, second_write)
    answerer = subprocess.Popen([sys.executable, "-c", _ANSWERER, *map(str, fds)], pass_fds=fds)
    for fd in fds:
        os.close(fd)
    poller = polling.Poller(0.002, first, second)
    only_second = 0
    for _ in range(50_000):
        os.write(bell, b"s")
        ready = {fd for fd, _ in poller.poll(timeout=10)}
        only_second += ready == {second}
        os.read(first, 1)
        os.read(second, 1)
    os.close(bell)
    assert answerer.wait(timeout=10) == 0
    os.close(first)
    os.close(second)
    assert only_second == 0


def test_workers_whose_parent_is_slow_between_steps_take_no_core_waiting():
    # A policy that takes 10 ms a step: each worker's CPU over 100 steps is its envs' steps,
    # not a spin of 2 ms a step (200 ms).
    with BatchEnv.external("Pendulum-v1", 4, envs_per_worker=2, spin=0.002) as env:
        env.reset(seed=0)
        workers = [psutil.Process(group.pid) for group in env.groups]
        before = [sum(w.cpu_times()[:2]) for w in workers]
        for _ in range(100):
            time.sleep(0.01)
            env.step(np.zeros((4, 1), np.float32))
        spent = [sum(w.cpu_times()[:2]) - b for w, b in zip(workers, before, strict=True)]
    assert max(spent) < 0.08, spent


def test_a_watched_fd_wakes_a_wait_in_any_thread_which_its_function_may_end():
    # A run's wakeup fd for Ctrl-C: a wait on a worker in one of XLA's threads, where
    # Python runs no signal handler, hears of a signal at once.
    own_read, own_write = os.pipe()
    watched_read, watched_write = os.pipe()
    poller = polling.Poller(0.0, own_read)  # Made before the watch began.
    heard, results = [], []
    first_heard, first_returned = threading.Event(), threading.Event()

    def on_ready():
        heard.append(os.read(watched_read, 16))
        first_heard.set()
        if len(heard) == 2:
            raise KeyboardInterrupt("second")

    def wait():
        try:
            results.append(poller.poll(10.0))
            first_returned.set()
            os.read(own_read, 1)
            results.append(poller.poll(10.0))
        except KeyboardInterrupt as error:
            results.append(error)

    with polling.watching(watched_read, on_ready):
        thread = threading.Thread(target=wait)
        thread.start()
        os.write(watched_write, b"\x02")  # Heard; the wait goes on for its own fd.
        assert first_heard.wait(10.0)
        os.write(own_write, b"x")
        assert first_returned.wait(10.0)
        os.write(watched_write, b"\x02")
        thread.join(10.0)
    assert heard == [b"\x02", b"\x02"]
    assert [fd for fd, _ in results[0]] == [own_read]
    assert isinstance(results[1], KeyboardInterrupt)
    os.write(watched_write, b"\x02")
    assert poller.poll(0.1) == []  # The watch is over: the fd left the poller's waits.
    for fd in (own_read, own_write, watched_read, watched_write):
        os.close(fd)

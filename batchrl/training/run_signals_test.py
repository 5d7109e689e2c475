"""A Ctrl-C that Python drops (raised in a garbage collector's callback) still stops a run."""

import os
import signal

import pytest

from batchrl.training import run


def test_a_ctrl_c_dropped_on_its_way_is_raised_at_the_next_phase():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # As at a terminal.
    with run.signals_kept() as received:
        try:  # As Python does with an exception raised in a gc callback: printed, dropped.
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):  # The handler runs at the next bytecode.
                pass
        except KeyboardInterrupt:
            pass
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            run.raise_received(received)
    assert signal.signal(signal.SIGINT, before) is signal.default_int_handler


def test_a_signal_ignored_before_stays_ignored():
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with run.signals_kept() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            run.raise_received(received)
        assert received == []
    finally:
        signal.signal(signal.SIGTERM, before)

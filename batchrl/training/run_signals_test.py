"""Ctrl-C and SIGTERM stop a run after the phase in flight, kept; a second one at once."""

import contextlib
import gc
import os
import signal
import time

import pytest

from batchrl.envs.host import polling
from batchrl.scripts import train
from batchrl.scripts.train_test import TINY, run_folder, saved_state
from batchrl.testing import interrupt
from batchrl.training import checkpoint, compile_signals, loop, metrics_log, run_signals


def _spin(seconds=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # A signal's handler runs at the next bytecode.
        pass


def test_the_first_signal_waits_for_the_phase_and_the_second_raises_at_once():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # As at a terminal.
    with run_signals.signals_kept() as received:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**6):  # The handler runs at the next bytecode; it raises nothing.
            pass
        assert received == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):  # Between phases.
            run_signals.raise_received(received)
    assert signal.signal(signal.SIGINT, before) is signal.default_int_handler


def test_a_second_signal_its_handler_counts_stops_the_phases_host_calls_too():
    # Counted by the handler (the main thread ran Python), a second SIGTERM in a long
    # MuJoCo-batch phase left the phase running in XLA's threads, and the exit waited.
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with run_signals.signals_kept():
            os.kill(os.getpid(), signal.SIGTERM)
            _spin()
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                os.kill(os.getpid(), signal.SIGTERM)
                _spin(10)
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                polling.hear()  # As the MuJoCo batch asks before each step.
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_second_ctrl_c_dropped_on_its_way_is_raised_at_the_next_phase():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with run_signals.signals_kept() as received:
            try:  # As Python does with an exception raised in a gc callback: printed, dropped.
                for _ in range(2):
                    os.kill(os.getpid(), signal.SIGINT)
                    for _ in range(10**6):
                        pass
            except KeyboardInterrupt:
                pass
            with pytest.raises(KeyboardInterrupt, match="SIGINT"):
                run_signals.raise_received(received)
    finally:
        assert signal.signal(signal.SIGINT, before) is signal.default_int_handler


@pytest.mark.parametrize("block", ["run", "compile"])
def test_a_ctrl_c_python_drops_in_a_gc_callback_is_sent_again_and_stops(block, capsys):
    # A second Ctrl-C in a long MuJoCo-batch phase came in JAX's gc callback: Python printed
    # its traceback, dropped it, and the phase ran on.
    pressed = []

    def press_in(phase, info):
        if phase == "start" and not pressed:
            pressed.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            _spin()  # Raised here, in the callback.

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with contextlib.ExitStack() as blocks:
            if block == "run":
                blocks.enter_context(run_signals.signals_kept())
                os.kill(os.getpid(), signal.SIGINT)  # The first: kept for the phase's end.
                _spin()
            else:
                blocks.enter_context(compile_signals.stopping())
            gc.callbacks.append(press_in)
            try:
                with pytest.raises(KeyboardInterrupt, match="SIGINT"):
                    gc.collect()
                    _spin(10)  # Sent again from a thread.
            finally:
                gc.callbacks.remove(press_in)
    finally:
        signal.signal(signal.SIGINT, before)
    assert pressed
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_ctrl_c_of_the_runs_start_dropped_on_its_way_is_raised_as_its_phases_begin():
    # Sent again once the start's compile returned, it landed in JAX's gc callback, which
    # printed and dropped it: the run trained to its end and exited 0, not 130.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with compile_signals.stopping():
            try:  # As Python does with an exception raised in a gc callback: printed, dropped.
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10**6):
                    pass
            except KeyboardInterrupt:
                pass
            with pytest.raises(KeyboardInterrupt, match="SIGINT"), run_signals.signals_kept():
                pass
            with run_signals.signals_kept():  # Raised once.
                pass
    finally:
        assert signal.signal(signal.SIGINT, before) is signal.default_int_handler


def test_a_signal_ignored_before_stays_ignored():
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with run_signals.signals_kept() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            run_signals.raise_received(received)
        assert received == []
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize(
    ("phase", "signals", "kept"), [(3, 1, 3), (3, 2, 2), (5, 1, 5)], ids=["once", "twice", "last"]
)
def test_ctrl_c_in_a_phase_keeps_it_and_twice_stops_at_once(
    tmp_path, monkeypatch, capfd, phase, signals, kept
):
    # Pendulum, compiled: 5 phases of 200 env steps; the signals come as `phase` starts.
    # In the last phase the run finishes: 0, as nothing is left to resume.
    saved, save = [], checkpoint.save
    monkeypatch.setattr(checkpoint, "save", lambda *a, **k: saved.append(a[1]) or save(*a, **k))
    with interrupt.sigint_at_call(monkeypatch, loop, "run_phase", phase, signals):
        argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", *TINY]
        assert train.main([*argv, "--set", "steps=1000"]) == (0 if kept == 5 else 130)
    folder = run_folder(tmp_path)
    assert checkpoint.steps(folder / "checkpoints")[-1] == kept
    # Each phase's checkpoint written once: the interrupt's is the one the phase wrote.
    assert saved == list(range(1, kept + 1))
    rows = metrics_log.read_jsonl(folder / "metrics.jsonl")
    assert [row["step"] for row in rows] == [200 * done for done in range(1, kept + 1)]
    out, err = capfd.readouterr()
    assert "batchrl: SIGINT: stopping after this phase; again to stop now" in err
    said = f"interrupted: saved a checkpoint at env step {200 * kept}"
    if kept == 5:
        said = f"finished in {folder}: the signal came in its last phase"
    assert said in out


def test_ctrl_c_in_a_together_run_keeps_the_phase_for_every_seed(tmp_path, monkeypatch, capfd):
    # Two seeds of 5 phases in one program; the signal comes as phase 3 starts.
    from batchrl.training import together_run

    with interrupt.sigint_at_call(monkeypatch, together_run, "_phase", 3):
        argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--seeds", "1", "2"]
        assert train.main([*argv, "--timestamp", "s{seed}", *TINY, "--set", "steps=1000"]) == 130
    folders = sorted(tmp_path.iterdir())
    assert [folder.name for folder in folders] == ["s1-pendulum_jax", "s2-pendulum_jax"]
    for folder in folders:
        assert checkpoint.steps(folder / "checkpoints")[-1] == 3
        rows = metrics_log.read_jsonl(folder / "metrics.jsonl")
        assert [row["step"] for row in rows] == [200, 400, 600]
    assert "stopping after this phase" in capfd.readouterr().err


@pytest.mark.parametrize("seeds", [[], ["--seeds", "1", "2"]], ids=["one", "together"])
def test_twice_in_the_first_phase_saves_nothing_and_the_same_command_starts_again(
    tmp_path, monkeypatch, capfd, seeds
):
    # A checkpoint of the state a run began with would hold what a new start makes.
    from batchrl.training import together_run

    owner, name = (together_run, "_phase") if seeds else (loop, "run_phase")
    argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", *seeds, *TINY]
    argv += ["--timestamp", "s{seed}" if seeds else "t", "--set", "steps=400"]
    with interrupt.sigint_at_call(monkeypatch, owner, name, 1, signals=2):
        assert train.main(argv) == 130
    folders = sorted(tmp_path.iterdir())
    assert len(folders) == (2 if seeds else 1)
    assert not any(checkpoint.steps(folder / "checkpoints") for folder in folders)
    out = capfd.readouterr().out
    assert "phase ended: nothing saved in " + ", ".join(map(str, folders)) in out
    assert "interrupted: saved" not in out
    assert train.main(argv) == 0
    for folder in folders:
        assert checkpoint.steps(folder / "checkpoints")[-1] == 2
        rows = metrics_log.read_jsonl(folder / "metrics.jsonl")
        assert [row["step"] for row in rows] == [200, 400]


def test_a_ctrl_c_as_the_best_phase_is_kept_leaves_its_best_policy_after_the_resume(
    tmp_path, monkeypatch
):
    # One evaluated phase, the best there is; the second Ctrl-C lands in its best.bin's
    # write, and the interrupted run checkpoints the phase, which the resume never re-does.
    real = checkpoint.save_best

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(checkpoint, "save_best", real)
        raise KeyboardInterrupt("signal SIGINT")

    monkeypatch.setattr(checkpoint, "save_best", interrupted)
    argv = ["--logdir", str(tmp_path), "--config", "pendulum_jax", "--timestamp", "t", *TINY]
    assert train.main([*argv, "--set", "steps=200"]) == 130
    folder = run_folder(tmp_path)
    assert checkpoint.steps(folder / "checkpoints") == [1]
    assert not (folder / "checkpoints" / checkpoint.BEST).exists()
    assert train.main([*argv, "--set", "steps=200"]) == 0  # It has trained all its phases.
    best = folder / "checkpoints" / checkpoint.BEST
    assert checkpoint.step_of(best) == 1
    last = checkpoint.path_for(folder / "checkpoints", 1)
    assert saved_state(best) == saved_state(last)
    evaluated = metrics_log.read_jsonl(folder / "metrics.jsonl")[-1]["eval/return"]
    assert checkpoint.best_of(best) == (1, evaluated)

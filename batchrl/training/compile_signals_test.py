import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from batchrl.scripts import train
from batchrl.training import compile_signals

# A thread that presses Ctrl-C PRESSES times once the main thread waits for an XLA compile.
PRESS = textwrap.dedent(
    """
    import signal, sys, threading, time
    from batchrl.training import compile_signals, thread_stack

    main = threading.main_thread().ident

    def press():
        deadline = time.monotonic() + 120
        while not compile_signals.compiling(thread_stack.functions(main)):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        for _ in range(PRESSES):  # Pressed again at once.
            signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=press, daemon=True).start()
    """
)

# Pressed twice in the compile of a program that takes seconds to compile.
PRESSED_IN_A_COMPILE = PRESS.replace("PRESSES", "2") + textwrap.dedent(
    """
    import jax, jax.monitoring, jax.numpy as jnp, numpy as np

    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiled.append(event.endswith("backend_compile_duration"))
    )

    signal.signal(signal.SIGINT, compile_signals.raise_interrupt)

    def long_to_compile(x):
        for i in range(400):
            x = jnp.tanh(x @ x + i)
        return x

    step, x = jax.jit(long_to_compile), np.ones((4, 4), np.float32)
    try:
        # The phases of a run, the first one compiled: the only compile, as x is NumPy's.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # As a run does between phases: an interrupt that went nowhere (raised in a
            # callback whose caller drops it) is raised again here.
            compile_signals.raise_dropped()
            step(x).block_until_ready()
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted", "after the compile" if any(compiled) else "in the compile")
    """
)


# The train command and `batchrl.train`, pressed once in their first compile, before the
# run loop keeps signals.
TRAINING_PRESSED_IN_ITS_FIRST_COMPILE = {
    "command": "from batchrl.scripts import train\nsys.exit(train.main(sys.argv[1:]))",
    "api": textwrap.dedent(
        """
        import batchrl
        try:
            batchrl.train("cartpole_jax", logdir=sys.argv[2], num_envs=4)
        except KeyboardInterrupt:
            sys.exit(130)
        """
    ),
}

# The session's compilation cache left out, so that programs compile.
UNCACHED = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}


def test_ctrl_c_in_an_xla_compile_stops_the_program_when_the_compile_returns():
    # Raised in the compile, the interrupt left XLA compiling while Python exited: the
    # process crashed (SIGSEGV) in most runs.
    done = subprocess.run(
        [sys.executable, "-c", PRESSED_IN_A_COMPILE],
        capture_output=True,
        text=True,
        timeout=240,
        env=UNCACHED,
    )
    assert (done.returncode, done.stdout) == (0, "interrupted after the compile\n"), done.stderr
    assert done.stderr == "batchrl: SIGINT: stopping when XLA's compile returns\n"


@pytest.mark.parametrize("how", ["command", "api"])
def test_ctrl_c_before_the_first_phase_stops_training_with_130(tmp_path, how):
    # Python's own Ctrl-C raised in a compile of the run's start, and the process crashed
    # ("terminate called without an active exception", exit -6) or stopped with 130.
    script = PRESS.replace("PRESSES", "1") + TRAINING_PRESSED_IN_ITS_FIRST_COMPILE[how]
    command = ["--logdir", str(tmp_path), "--config", "cartpole_jax", "--set", "num_envs=4"]
    done = subprocess.run(
        [sys.executable, "-c", script, *command],
        capture_output=True,
        text=True,
        timeout=240,
        env=UNCACHED,
    )
    assert done.returncode == 130, done.stderr
    assert "batchrl: SIGINT: stopping when XLA's compile returns\n" in done.stderr
    if how == "command":  # It said nothing of the run it stopped.
        (rundir,) = tmp_path.iterdir()
        said = f"interrupted before its first phase ended: nothing saved in {rundir}\n"
        assert done.stdout.endswith(said), done.stdout


@pytest.mark.slow  # A run, then its resume's start: seconds.
def test_a_resumed_run_pressed_in_its_first_compile_says_what_it_keeps(tmp_path):
    # A new run's folder said "nothing saved"; a resumed one's stop said nothing at all.
    command = ["--logdir", str(tmp_path), "--config", "cartpole_jax", "--timestamp", "t"]
    command += ["--set", "num_envs=4", "steps=2000"]
    assert train.main(command) == 0
    script = PRESS.replace("PRESSES", "1") + TRAINING_PRESSED_IN_ITS_FIRST_COMPILE["command"]
    done = subprocess.run(
        [sys.executable, "-c", script, *command[:-1], "steps=4000"],
        capture_output=True,
        text=True,
        timeout=240,
        env=UNCACHED,
    )
    assert done.returncode == 130, done.stderr
    rundir = tmp_path / "t-cartpole_jax"
    said = f"interrupted before its first phase ended: {rundir} keeps its checkpoints, which "
    assert done.stdout.endswith(said + "a resume goes on from\n"), done.stdout


def test_a_stop_is_sent_again_only_in_its_block_and_only_if_none_came_since():
    # Sent after its block, a SIGTERM met the default action and killed the process (143);
    # sent while another stop ended the block, it cut the block's cleanup short.
    calls = []

    def record(signum, frame):
        calls.append(signum)

    def spin():
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:  # The handler runs at the next bytecode.
            pass

    before = signal.signal(signal.SIGINT, record)
    try:
        with compile_signals.stopping(record):
            ended = compile_signals._counts()
        with compile_signals.stopping(record):
            compile_signals._send(signal.SIGINT, ended)  # Another block's.
            spin()
            came = compile_signals._counts()
            compile_signals.interrupt(signal.SIGINT)  # A stop raised since.
            compile_signals._send(signal.SIGINT, came)
            spin()
            assert calls == []
            compile_signals._send(signal.SIGINT, compile_signals._counts())
            spin()
            assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, before)

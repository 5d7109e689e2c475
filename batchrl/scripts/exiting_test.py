import re
import signal
import subprocess
import sys
import textwrap

import pytest

# The train command run as `python -m batchrl.scripts.train` runs it, with a thread that
# sends SIGTERM twice once the main thread waits for a phase's program (compiled: not
# during its compile), as a user's Ctrl-C twice in a long phase.
SCRIPT = textwrap.dedent(
    """
    import os, runpy, signal, sys, threading, time
    from batchrl.training import compile_signals, thread_stack

    def in_phase():
        functions = thread_stack.functions(threading.main_thread().ident) or []
        finished = (file.endswith("phase.py") and name == "finished" for file, name in functions)
        return any(finished) and not compile_signals.compiling(functions)

    def stop(wait):
        while not in_phase():
            time.sleep(0.01)
        time.sleep(wait)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # Counted on its own: not merged with the second by the kernel.
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, args=(float(sys.argv[1]),), daemon=True).start()
    sys.argv = ["batchrl.scripts.train", *sys.argv[2:]]
    runpy.run_module("batchrl.scripts.train", run_name="__main__", alter_sys=True)
    """
)
SMALL = ["policy_layers=16", "value_layers=16", "eval_every=1000", "num_envs=2"]


def _stopped(tmp_path, preset, settings, wait, timeout=120):
    (tmp_path / "stop.py").write_text(SCRIPT)
    command = [sys.executable, "stop.py", str(wait), "--logdir", "runs", "--config", preset]
    done = subprocess.run(
        [*command, "--set", *SMALL, *settings],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 130, done.stderr[-2000:]
    return done


# A phase of 100M env steps, hours long: the command must not wait for its end.
@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("pendulum_jax", ["max_length=50"]),  # One XLA program, its wait cut in Python.
        ("hopper", ["backend=mujoco", "max_length=50", "update_every=2"]),  # Stepped in host calls.
    ],
)
def test_a_second_stop_in_a_long_phase_exits_at_once(tmp_path, preset, settings):
    endless = ["steps=100000000", "phase_steps=100000000"]
    # 2 s into it: a stop as it begins lands before its program runs, where Python runs.
    done = _stopped(tmp_path, preset, [*settings, *endless], wait=2.0)
    assert "stopping after this phase; again to stop now" in done.stderr
    assert "interrupted before its first phase ended: nothing saved in runs/" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_a_second_stop_in_an_atari_phase_frees_the_games_once_it_has_run(tmp_path):
    # ale-py's calls run in its C++ threads, which no signal stops: the command waits for
    # the phase, then frees the games; freed under it, the phase failed at the exit with
    # "Action id buffer is the wrong size".
    settings = ["backend=ale", "cnn=minatar", "steps=2048", "phase_steps=1024"]
    done = _stopped(tmp_path, "breakout", settings, wait=0.2)
    # The first phase may end before the second stop: then it is saved, else nothing is.
    saved = r"interrupted: saved a checkpoint at env step 1,024 in runs/"
    nothing = r"interrupted before its first phase ended: nothing saved in runs/"
    assert re.search(f"{saved}|{nothing}", done.stdout), done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("status", [0, 1, 130])
def test_a_signal_in_the_commands_exit_keeps_its_status(status):
    # As `timeout` or a scheduler's SIGTERM that lands in JAX's clean-up at the exit.
    script = textwrap.dedent(
        f"""
        import atexit, time
        from batchrl.scripts import exiting

        def slow_clean_up():
            print("exiting", flush=True)
            time.sleep(60)

        atexit.register(slow_clean_up)
        exiting.leave({status})
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "exiting\n"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == status


# The train command with a Ctrl-C that lands in a garbage collector's callback (JAX has
# one) as the run starts, before its first phase: where Python prints it and drops it.
IN_GC_CALLBACK = textwrap.dedent(
    """
    import gc, os, runpy, signal, sys
    from batchrl.training import environments

    fired = []

    def callback(phase, info):
        if phase == "start" and fired == [False]:
            fired[0] = True
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # Its handler runs here, inside the callback.
                pass

    def check_run(*args, _check_run=environments.check_run, **kwargs):
        fired.append(False)
        gc.collect()
        return _check_run(*args, **kwargs)

    gc.callbacks.append(callback)
    environments.check_run = check_run
    sys.argv = ["batchrl.scripts.train", *sys.argv[1:]]
    runpy.run_module("batchrl.scripts.train", run_name="__main__", alter_sys=True)
    """
)


def test_a_ctrl_c_dropped_in_a_gc_callback_as_the_run_starts_still_stops_it(tmp_path):
    # It went nowhere: "Exception ignored in: <function _xla_gc_callback ...>", and the
    # run trained to its end (exit status 0).
    (tmp_path / "start.py").write_text(IN_GC_CALLBACK)
    command = [sys.executable, "start.py", "--logdir", "runs", "--config", "pendulum_jax"]
    done = subprocess.run(
        [*command, "--set", *SMALL, "max_length=50", "steps=200000"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert "phase 1 " not in done.stdout


def test_a_finished_commands_threads_end_before_its_exit_functions_run():
    # As in Python's own exit: logging's and multiprocessing's clean-up after the threads.
    script = textwrap.dedent(
        """
        import atexit, threading, time
        from batchrl.scripts import exiting

        ended = []
        atexit.register(lambda: print("threads ended first:", bool(ended), flush=True))
        threading.Thread(target=lambda: (time.sleep(0.3), ended.append(True))).start()
        exiting.leave(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "threads ended first: True\n"), done.stderr


@pytest.mark.parametrize("status", [0, 1])
def test_a_signal_in_pythons_teardown_keeps_the_commands_status(status):
    # Past the point where Python hands the signals back to their defaults (freeing XLA's
    # client, near a second, is there), a SIGTERM ended a finished run as killed (-15).
    script = textwrap.dedent(
        f"""
        import gc, os, signal, time
        from batchrl.scripts import exiting

        class Late:  # Collected in the teardown, after the signals are handed back.
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)

        late = Late()
        late.cycle = late
        del late
        gc.disable()
        exiting.leave({status})
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == status, done.stderr[-2000:]


# A worker env whose `close` takes seconds, and a thread that sends SIGTERM while the
# command waits for it: after the run's last phase, as it closes its envs.
SLOW_CLOSE = textwrap.dedent(
    """
    import time
    import gymnasium as gym

    class SlowClose(gym.Wrapper):
        def __init__(self):
            super().__init__(gym.make("Pendulum-v1", max_episode_steps=50))

        def close(self):
            time.sleep(5)
            super().close()
    """
)
IN_CLOSE = textwrap.dedent(
    """
    import os, runpy, signal, sys, threading, time
    from batchrl.training import thread_stack

    def stop():
        while not any(
            file.endswith("process.py") and name == "close"
            for file, name in thread_stack.functions(threading.main_thread().ident) or []
        ):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, daemon=True).start()
    sys.argv = ["batchrl.scripts.train", *sys.argv[1:]]
    runpy.run_module("batchrl.scripts.train", run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.slow
def test_a_signal_as_a_finished_run_closes_its_envs_exits_finished(tmp_path):
    (tmp_path / "slow_close.py").write_text(SLOW_CLOSE)
    (tmp_path / "stop.py").write_text(IN_CLOSE)
    command = [sys.executable, "stop.py", "--logdir", "runs", "--config", "pendulum"]
    settings = ["env=slow_close:SlowClose", "steps=400", "max_length=50", "eval_every=1"]
    done = subprocess.run(
        [*command, "--timestamp", "t", "--set", *SMALL, *settings],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "finished in runs/t-pendulum: the signal came as it closed" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_an_env_that_crashes_in_c_as_it_is_built_says_where(tmp_path):
    # Built once in the command's own process to read its spaces: it ended unsaid (-11).
    crash = "import ctypes\nimport gymnasium as gym\n\n\nclass Crash(gym.Env):\n"
    (tmp_path / "crash.py").write_text(
        crash + "    def __init__(self):\n        ctypes.string_at(0)\n"
    )
    command = [sys.executable, "-m", "batchrl.scripts.train", "--logdir", "runs"]
    done = subprocess.run(
        [*command, "--config", "pendulum", "--set", "env=crash:Crash"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr, done.stderr[-2000:]
    assert f'File "{tmp_path / "crash.py"}", line 7 in __init__' in done.stderr

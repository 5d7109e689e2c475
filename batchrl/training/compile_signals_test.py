import os
import subprocess
import sys
import textwrap

# A Ctrl-C pressed while the main thread waits for XLA's compile of a program that takes
# seconds to compile; the handler is the train command's.
PRESSED_IN_A_COMPILE = textwrap.dedent(
    """
    import signal, sys, threading, time
    import jax, jax.monitoring, jax.numpy as jnp, numpy as np
    from batchrl.training import compile_signals

    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiled.append(event.endswith("backend_compile_duration"))
    )

    def interrupt(signum, frame):
        if not compile_signals.deferred(signum, frame):
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    main = threading.main_thread().ident

    def press():
        deadline = time.monotonic() + 120
        while not compile_signals.in_compile(sys._current_frames().get(main)):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)
        signal.pthread_kill(main, signal.SIGINT)  # Pressed again, at once.

    threading.Thread(target=press, daemon=True).start()

    def long_to_compile(x):
        for i in range(400):
            x = jnp.tanh(x @ x + i)
        return x

    step, x = jax.jit(long_to_compile), np.ones((4, 4), np.float32)
    try:
        # The phases of a run, the first one compiled: the only compile, as x is NumPy's.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            step(x).block_until_ready()
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted", "after the compile" if any(compiled) else "in the compile")
    """
)


def test_ctrl_c_in_an_xla_compile_stops_the_program_when_the_compile_returns():
    # Raised in the compile, the interrupt left XLA compiling while Python exited: the
    # process crashed (SIGSEGV) in most runs. The session's compilation cache is left out,
    # so that the program compiles.
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", PRESSED_IN_A_COMPILE],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert (done.returncode, done.stdout) == (0, "interrupted after the compile\n"), done.stderr
    assert done.stderr == "batchrl: SIGINT: stopping when XLA's compile returns\n"

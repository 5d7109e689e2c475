import contextlib
import functools
import gc
import json
import multiprocessing
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

from batchrl.conftest import wait_gone
from batchrl.envs import BatchEnv
from batchrl.envs.host import errors, external, lifecycle
from batchrl.testing import mock


def make_pendulum():
    return gym.make("Pendulum-v1")


def test_matches_stepping_the_env_directly():
    local = make_pendulum()
    with external.ExternalProcess(make_pendulum) as remote:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        obs, _info = remote.reset(seed=5)
        local_obs, _local_info = local.reset(seed=5)
        np.testing.assert_array_equal(obs, local_obs)
        for action in np.linspace(-2, 2, 30, dtype=np.float32)[:, None]:
            result = remote.step(action)
            expected = local.step(action)
            np.testing.assert_array_equal(result[0], expected[0])
            assert result[1:4] == expected[1:4]


def test_promises_step_several_envs_in_parallel():
    envs = [external.ExternalProcess(make_pendulum) for _ in range(3)]
    try:
        promises = [env.reset(seed=i, blocking=False) for i, env in enumerate(envs)]
        first = [promise()[0] for promise in promises]
        assert not np.array_equal(first[0], first[1])
        promises = [env.step(np.array([1.0], np.float32), blocking=False) for env in envs]
        results = [promise() for promise in promises]
        local = make_pendulum()
        for i, (obs, reward, *_) in enumerate(results):
            local.reset(seed=i)
            local_obs, local_reward, *_ = local.step(np.array([1.0], np.float32))
            np.testing.assert_array_equal(obs, local_obs)
            assert reward == local_reward
    finally:
        for env in envs:
            env.close()


def test_lambda_constructor_attribute_and_call():
    duration = 7
    with external.ExternalProcess(lambda: mock.CountingEnv(duration=duration)) as env:
        assert env.get_attr("duration") == 7
        assert env.call("get_wrapper_attr", "duration") == 7
        env.reset(seed=0)
        assert env.step(np.zeros(2, np.float32))[0][0] == 1.0


def test_a_second_request_before_collecting_the_first_is_refused():
    with external.ExternalProcess(make_pendulum) as env:
        env.reset(seed=0)
        promise = env.step(np.zeros(1, np.float32), blocking=False)
        with pytest.raises(errors.EnvError, match="its step is still in flight"):
            env.step(np.zeros(1, np.float32))
        promise()


def test_an_envs_error_is_placed_at_the_last_line_of_the_users_code():
    # An env whose step called json.loads on bad text was placed in json's decoder.
    json_file = os.path.join(os.path.dirname(json.__file__), "decoder.py")
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{errors.__file__}", line 9, in run\n'
        '  File "/home/me/envs/walk.py", line 17, in step\n'
        f'  File "{json_file}", line 353, in raw_decode\n'
    )
    assert errors.rose_at(text) == " at /home/me/envs/walk.py:17"
    # Every frame a library's (a Gymnasium env's own check): the last one.
    assert errors.rose_at(text.replace("/home/me/envs/walk.py", json_file)).endswith(":353")
    assert errors.rose_at("no traceback") == ""


@pytest.mark.parametrize("where", ["init", "reset", "step"])
def test_exception_reaches_parent_with_traceback_and_env_name(where):
    constructor = functools.partial(mock.FailingEnv, where=where, how="raise")
    if where == "init":
        with pytest.raises(errors.EnvRaisedError) as caught:
            external.ExternalProcess(constructor)
        assert "ValueError: FailingEnv failed on purpose in init" in str(caught.value)
        assert "raised by env from FailingEnv (env 0" in str(caught.value)
        assert "mock.py" in caught.value.remote_traceback
        return
    with external.ExternalProcess(constructor) as env:
        if where == "step":
            env.reset(seed=0)
        with pytest.raises(errors.EnvRaisedError) as caught:
            if where == "step":
                env.step(np.zeros(2, np.float32))
            else:
                env.reset(seed=0)
        message = str(caught.value)
        assert message.startswith(f"ValueError: FailingEnv failed on purpose in {where}")
        assert "'FailingEnv'" in message and f"during {where} at {mock.__file__}:" in message
        assert f"in {where}" in caught.value.remote_traceback
        assert "_fail" in caught.value.remote_traceback
        # The worker survives an exception in its env.
        env.reset(seed=1)


class _OwnError(Exception):
    """An env's own exception type, in a module the parent has imported."""


class _RaisesItsOwn(mock.CountingEnv):
    """Raises what `kind` names at its first step."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def step(self, action):
        kinds = {"own": _OwnError, "reset needed": gym.error.ResetNeeded, "os": OSError}
        raise kinds[self.kind]("on purpose")


@pytest.mark.parametrize(
    ("kind", "caught_as"),
    [("own", _OwnError), ("reset needed", gym.error.ResetNeeded), ("os", errors.EnvRaisedError)],
)
def test_an_envs_exception_is_of_its_own_type_too(kind, caught_as):
    # Only an EnvRaisedError: `except ValueError` written for envs in this process (as
    # SyncVectorEnv and AsyncVectorEnv raise them) missed it.
    with external.ExternalProcess(functools.partial(_RaisesItsOwn, kind)) as env:
        env.reset(seed=0)
        with pytest.raises(caught_as) as caught:
            env.step(np.zeros(2, np.float32))
    error = caught.value
    assert isinstance(error, errors.EnvRaisedError) and str(error).endswith(error.remote_traceback)
    assert type(error).__name__ == "EnvRaisedError"  # As error lines and tracebacks name it.
    assert str(error).startswith(f"{error.error_type}: on purpose (raised by env '_RaisesItsOwn'")
    # OSError builds its fields from its arguments: EnvRaisedError alone.
    assert isinstance(error, OSError) is (kind != "os" and issubclass(caught_as, OSError))
    again = pickle.loads(pickle.dumps(error))  # Across processes, as Ray's actors send it.
    assert type(again) is type(error) and str(again) == str(error)
    assert again.remote_traceback == error.remote_traceback


class _Exits(mock.CountingEnv):
    """Calls `sys.exit(2)`, or raises KeyboardInterrupt, at its second step."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.stepped = kind, 0

    def step(self, action):
        self.stepped += 1
        if self.stepped == 2:
            raise SystemExit(2) if self.kind == "exit" else KeyboardInterrupt
        return super().step(action)


@pytest.mark.parametrize(("kind", "said"), [("exit", "SystemExit: 2"), ("interrupt", "Keyboard")])
def test_an_envs_own_exit_is_its_error_and_its_worker_serves_on(kind, said):
    # Its worker ended, racing its error to this process: "died (exit code 0)" or not.
    makers = [mock.CountingEnv, functools.partial(_Exits, kind)]
    with BatchEnv.external(makers) as env:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        with pytest.raises(errors.EnvRaisedError) as caught:
            env.step(env.action_space.sample())
        assert str(caught.value).startswith(said)
        assert "(raised by env '_Exits' (env 1, worker pid " in str(caught.value)
        env.reset(seed=1)  # Served on, as after any exception of its env.
        env.step(env.action_space.sample())


@pytest.mark.parametrize(("where", "at"), [("reset", 1), ("step", 2), ("reset", 2)])
def test_an_envs_error_names_that_env_among_its_workers_envs(where, at):
    # A worker of several envs named them all ("envs 2-3"), not the one that raised. The
    # second reset is the autoreset after a 3-step episode.
    makers = [functools.partial(mock.FailingEnv, where, at=10**6)] * 3
    makers.append(functools.partial(mock.FailingEnv, where, at=at))
    with (
        BatchEnv.external(makers, envs_per_worker=2) as env,
        pytest.raises(errors.EnvRaisedError) as caught,
    ):
        env.reset(seed=0)
        for _ in range(4):
            env.step(env.action_space.sample())
    said = str(caught.value)
    assert said.startswith(f"ValueError: FailingEnv failed on purpose in {where} (raised by ")
    assert "raised by env 'FailingEnv' (env 3, worker pid " in said, said


def _full_range_actions() -> gym.Env:
    return mock.ActionEcho(gym.spaces.Box(-(2**31), 2**31 - 1, (2,), np.int32))


def test_integer_actions_past_a_float32_row_step_as_in_gymnasiums_vector_envs():
    # A policy's float32 row holds integers exactly to 2**24 only, which training
    # refuses past (networks/action_tree_test.py); a batch was refused them too, where
    # AsyncVectorEnv steps them (its own tests' int32 Box).
    from batchrl.envs import BatchEnv

    with BatchEnv.external([_full_range_actions] * 2, envs_per_worker=1) as batch:
        batch.reset(seed=0)
        actions = np.array([[2**31 - 1, -(2**31)], [5, 7]], np.int32)
        np.testing.assert_array_equal(batch.step(actions)[0], actions)


@pytest.mark.parametrize("how", ["exit", "sigkill", "segv"])
def test_dead_worker_is_reported_at_once(how):
    # With no timeout, only the worker's death can end the wait for its answer.
    constructor = functools.partial(mock.FailingEnv, how=how, at=2)
    env = external.ExternalProcess(constructor, timeout=None)
    env.reset(seed=0)
    env.step(np.zeros(2, np.float32))
    pid = env.pid
    with pytest.raises(errors.EnvCrashedError, match="died") as caught:
        env.step(np.zeros(2, np.float32))
    assert "'FailingEnv'" in str(caught.value) and "restart=True" in str(caught.value)
    with pytest.raises(errors.EnvError, match="unusable"):
        env.step(np.zeros(2, np.float32))
    env.close()
    assert not wait_gone([pid])


def test_hung_worker_times_out_and_is_killed():
    env = external.ExternalProcess(functools.partial(mock.FailingEnv, how="hang", at=2))
    env.reset(seed=0)
    env.step(np.zeros(2, np.float32))
    pid = env.pid
    # Only the step that hangs waits this short, so no healthy answer a loaded machine
    # delays can be mistaken for a hang.
    env.group.timeout = 0.5
    start = time.monotonic()
    with pytest.raises(errors.EnvTimeoutError, match=r"did not answer step within 0.5 s"):
        env.step(np.zeros(2, np.float32))
    assert time.monotonic() - start > 0.4  # It waited its timeout (however long after).
    assert not wait_gone([pid])
    env.close()


@pytest.mark.parametrize("how", ["sigkill", "hang"])
def test_restart_replaces_a_dead_or_hung_worker(how, caplog):
    def run():
        constructor = functools.partial(mock.FailingEnv, how=how, at=3, duration=100)
        with external.ExternalProcess(constructor, restart=True) as env:
            env.reset(seed=11)
            results = [env.step(np.zeros(2, np.float32)) for _ in range(2)]
            # Only the step that fails waits this short (see the test above).
            env.group.timeout = 0.5
            results.append(env.step(np.zeros(2, np.float32)))
            env.group.timeout = lifecycle.DEFAULT_TIMEOUT
            results += [env.step(np.zeros(2, np.float32)) for _ in range(2)]
            return results, env.restarts

    results, restarts = run()
    assert restarts == 1
    assert [r[3] for r in results] == [False, False, True, False, False]  # truncated
    assert results[2][1] == 0.0 and results[2][4]["restarted"] is True
    assert results[2][0][0] == 0.0  # A fresh episode begins.
    assert results[3][0][0] == 1.0
    assert "restart 1 of this worker" in caplog.text
    assert "earlier call" not in caplog.text  # It failed in this very step.
    assert "restart=True" not in caplog.text  # It was passed: no advice to pass it.
    # Restarts are seeded from (seed, env index, restart count): a rerun is identical.
    again, _ = run()
    for a, b in zip(results, again, strict=True):
        np.testing.assert_array_equal(a[0], b[0])


def test_a_worker_a_failed_call_left_dead_is_replaced_under_that_calls_error(caplog):
    # The replacement dies in the reset it is to retry: raised. The next step found the
    # worker dead and logged "died (exit code 3) during step", a step that never ran.
    constructor = functools.partial(mock.FailingEnv, where="reset", how="exit", at=2)
    with external.ExternalProcess(constructor, restart=True) as env:
        env.reset(seed=0)
        with pytest.raises(errors.EnvCrashedError, match=r"died \(exit code 3\) during reset"):
            env.reset(seed=1)
        caplog.clear()
        *_, truncated, info = env.step(np.zeros(2, np.float32))
    assert truncated and info["restarted"]
    assert "died (exit code 3) during reset (an earlier call's error); restart 2" in caplog.text
    assert "during step" not in caplog.text


def _dies_while_starting_on_builds(counter, dying, **kwargs):
    """A CountingEnv whose worker is killed while it builds it the times listed in `dying`."""
    path = pathlib.Path(counter)
    builds = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(builds))
    if builds in dying:
        os.kill(os.getpid(), signal.SIGKILL)
    return mock.CountingEnv(**kwargs)


@pytest.mark.parametrize(("dying", "works"), [((2, 3), True), ((2, 3, 4), False)])
def test_a_replacement_that_dies_while_starting_is_replaced_again(tmp_path, dying, works):
    # The first replacement and the second die while they build their env; the third
    # starts (RESTART_TRIES = 3). When the third dies too, the crash is raised.
    constructor = functools.partial(
        _dies_while_starting_on_builds, str(tmp_path / "builds"), dying, duration=100
    )
    with external.ExternalProcess(constructor, restart=True) as env:
        env.reset(seed=0)
        env.step(np.zeros(2, np.float32))
        os.kill(env.pid, signal.SIGKILL)
        if works:
            _, _, _, truncated, info = env.step(np.zeros(2, np.float32))
            assert truncated and info["restarted"] and env.restarts == 3
        else:
            with pytest.raises(errors.EnvCrashedError, match=r"died .* during start") as caught:
                env.step(np.zeros(2, np.float32))
            # The last line says the crash ended a loop of restarts, not a first start.
            assert str(caught.value).endswith(": 3 replacements in a row died so")
            assert "restart=True" not in str(caught.value)  # It is on: no advice to turn it on.


def test_close_is_idempotent_and_ends_the_worker():
    env = external.ExternalProcess(make_pendulum)
    pid = env.pid
    env.close()
    env.close()
    assert not wait_gone([pid])
    with pytest.raises(errors.EnvError, match="closed"):
        env.reset()


def _held() -> tuple[int, int]:
    """This process's open files and its mappings of shared files.

    Garbage collected first: an earlier test's objects, freed between two readings
    whenever the collector came by, closed files of theirs and made the count a chance.
    """
    gc.collect()
    with open("/proc/self/maps") as maps:
        shared = sum("/batchrl-" in line for line in maps)
    return len(os.listdir("/proc/self/fd")), shared


@pytest.mark.parametrize("close", ["close", "terminate"])
def test_a_closed_batch_still_referenced_holds_no_pipes_or_shared_memory(close):
    # Kept by a list of a sweep's envs, a closed batch held 3 files a worker (pipes and its
    # shared memory, the /dev/shm pages with it) until collected: 340 such workers and
    # "Too many open files". What it last returned stays readable.
    BatchEnv.external("CartPole-v1", 2).close()  # Starts what a first batch starts once.
    before = _held()
    kept = [BatchEnv.external("CartPole-v1", 4, envs_per_worker=1) for _ in range(2)]
    for batch in kept:
        batch.reset(seed=0)
        obs, *_ = batch.step(np.zeros(4, np.int64))
        pids = [group.pid for group in batch.groups]
        batch.close(terminate=close == "terminate")
        assert not wait_gone(pids)
        assert np.isfinite(obs).all() and np.array_equal(batch.groups[0].buffers.obs, obs[:1])
    assert _held() == before


def test_close_waits_for_envs_that_take_their_time_to_close(tmp_path):
    # An env's close may write files (RecordVideo's last video): its worker was killed
    # 1 s after the close was asked, the file never written, nothing said.
    from batchrl.envs import BatchEnv

    closes = tmp_path / "closes"
    env = functools.partial(mock.WitnessEnv, closes=str(closes), close_seconds=1.5)
    batch = BatchEnv.external([env] * 2, envs_per_worker=1)
    pids = [g.pid for g in batch.groups]
    batch.close()
    assert len(closes.read_text().splitlines()) == 2 and not wait_gone(pids)


def test_a_close_past_the_timeout_is_killed_with_a_warning(tmp_path, caplog):
    closes = tmp_path / "closes"
    env = functools.partial(mock.WitnessEnv, closes=str(closes), close_seconds=60)
    remote = external.ExternalProcess(env, timeout=0.5)
    pid = remote.pid
    remote.close()
    assert not wait_gone([pid]) and not closes.exists()
    (record,) = [r for r in caplog.records if "did not close" in r.getMessage()]
    assert record.getMessage().endswith("did not close its envs within 0.5 s and was killed")


def test_a_batchs_workers_stuck_in_close_get_the_timeout_side_by_side(caplog, monkeypatch):
    # Each got its timeout after the one before: 16 stuck workers at 60 s, 16 minutes.
    from batchrl.envs import BatchEnv
    from batchrl.envs.host import process

    env = functools.partial(mock.WitnessEnv, close_seconds=60)
    batch = BatchEnv.external([env] * 4, envs_per_worker=1, timeout=5.0)
    pids = [g.pid for g in batch.groups]
    waits, wait = [], multiprocessing.connection.wait
    monkeypatch.setattr(
        process.multiprocessing.connection,
        "wait",
        lambda objects, timeout=None: waits.append(timeout or 0.0) or wait(objects, timeout),
    )
    batch.close()
    # The first worker's wait takes the timeout; the others' is spent by then, not 5 s more.
    assert len([timeout for timeout in waits if timeout > 2.5]) == 1 and not wait_gone(pids)
    assert len([r for r in caplog.records if "did not close" in r.getMessage()]) == 4


def test_a_slow_start_gets_the_timeout_where_it_is_longer(monkeypatch):
    # The start's limit was fixed: a worker building envs for longer than it failed
    # whatever timeout was given, and was told to raise the timeout.
    monkeypatch.setattr(lifecycle, "START_TIMEOUT", 0.2)
    slow = functools.partial(mock.WitnessEnv, build_seconds=1.0)
    with external.ExternalProcess(slow, timeout=10) as remote:
        remote.reset(seed=0)
    with pytest.raises(errors.EnvTimeoutError) as caught:
        external.ExternalProcess(slow, timeout=0.3, restart=False)
    message = str(caught.value)
    assert message.endswith(
        "did not answer start within 0.3 s and was killed; a worker gets 0.2 s to build "
        "its envs, or the timeout if longer: raise the timeout"
    )


def test_unknown_start_method_is_refused():
    with pytest.raises(ValueError, match="unknown start method 'fork'"):
        external.ExternalProcess(make_pendulum, context="fork")


@pytest.mark.parametrize("context", ["forkserver", None])  # None: AsyncVectorEnv's default.
def test_forkserver_start_method_works(context):
    with external.ExternalProcess(make_pendulum, context=context) as env:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3,)
        assert psutil.Process(env.pid).parent().pid != os.getpid()  # The fork server's child.


ORPHAN_SCRIPT = """
import os
import re
import signal
import sys
import threading

import numpy as np
from batchrl.envs import BatchEnv
from batchrl.testing import mock


class Hangs(mock.FailingEnv):
    # Hangs in its third step, having said so on the stdout its worker shares.
    def __init__(self):
        super().__init__(how="hang", at=3, duration=10**6)

    def _fail(self):
        print("hung", flush=True)
        if os.environ.get("HOLD_GIL"):  # A C call that never returns the GIL: no watchdog runs.
            re.match(r"(a+)+$", "a" * 64 + "b")
        super()._fail()


if __name__ == "__main__":
    # The last worker hangs in its third step, so a parent killed then leaves a busy
    # worker; it waits on it with no timeout, so only the signal can end the wait.
    makers = [mock.CountingEnv] * 2 + [Hangs] * 2
    env = BatchEnv.external(makers, envs_per_worker=2, timeout=None)
    env.reset(seed=0)
    if sys.argv[1] == "sigint_to_a_thread":
        # The kernel may give a signal to any thread that does not block it: here to
        # this one, never to the main thread, which waits in the hung step. (After the
        # workers start: multiprocessing unblocks SIGINT when it starts its helpers.)
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    print("ready", flush=True)
    if sys.argv[1] == "raise":
        sys.stdin.readline()  # Once the test has listed the workers: it ends at once after.
        raise RuntimeError("the parent fails without closing its envs")
    while True:
        env.step(np.zeros((4, 2), np.float32))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "ending",
    [
        "raise",
        "sigint_to_group",
        "sigint",
        "sigint_to_a_thread",
        "sigterm",
        "sigkill",
        # The OOM killer's end: workers holding the GIL, or stopped, ran no watchdog and
        # lived on, the fork server with them, a core each at 100 % for good.
        "sigkill_gil_held",
        "sigkill_stopped",
    ],
)
def test_no_worker_outlives_its_parent(ending, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(ORPHAN_SCRIPT)
    hold = {"HOLD_GIL": "1"} if ending == "sigkill_gil_held" else {}
    parent = subprocess.Popen(
        [sys.executable, str(script), ending],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **hold},
    )
    descendants = []
    try:
        assert parent.stdout.readline().strip() == "ready", parent.stderr.read()
        descendants = [p.pid for p in psutil.Process(parent.pid).children(recursive=True)]
        assert len(descendants) >= 2
        signals = {
            "sigint": signal.SIGINT,
            "sigint_to_a_thread": signal.SIGINT,
            "sigterm": signal.SIGTERM,
            "sigkill": signal.SIGKILL,
            "sigkill_gil_held": signal.SIGKILL,
            "sigkill_stopped": signal.SIGKILL,
        }
        if ending == "raise":  # Only now: raising, it closed its workers before they were listed.
            parent.stdin.write("go\n")
            parent.stdin.flush()
        else:  # Once the parent waits on the hung step, in `poll`.
            assert parent.stdout.readline().strip() == "hung", parent.stderr.read()
            wchan = pathlib.Path(f"/proc/{parent.pid}/wchan")  # Where the kernel has it wait.
            while "poll" not in wchan.read_text():
                time.sleep(0.01)
        if ending == "sigkill_stopped":  # Every worker, the fork server's children.
            for worker in psutil.Process(parent.pid).children(recursive=True):
                if worker.ppid() != parent.pid:
                    worker.send_signal(signal.SIGSTOP)
        if ending == "sigint_to_group":  # What Ctrl-C in a terminal does.
            os.killpg(parent.pid, signal.SIGINT)
        elif ending in signals:
            os.kill(parent.pid, signals[ending])
        code = parent.wait()
        assert code != 0
        assert not wait_gone(descendants)
        if ending in ("raise", "sigint", "sigint_to_group", "sigint_to_a_thread"):
            stderr = parent.stderr.read()
            assert "KeyboardInterrupt" in stderr or "the parent fails" in stderr
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
        for pid in descendants:  # Those a failing test found alive: not left for later tests.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_users_process_from_the_workers_fork_server_still_ends_at_sigterm():
    # The server shields itself and its workers from SIGTERM; what else it forks is not.
    with external.ExternalProcess(make_pendulum) as env:
        process = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(60,))
        process.start()
        process.terminate()  # At once, maybe before the process could unblock SIGTERM.
        process.join(30)
        assert process.exitcode == -signal.SIGTERM
        os.kill(env.pid, signal.SIGTERM)
        env.reset(seed=0)  # The worker ignored it.
        assert env.step(np.zeros(1, np.float32))[0].shape == (3,)


def test_a_process_an_env_starts_ends_at_sigint_and_sigterm():
    # A worker shields itself from a job's Ctrl-C and SIGTERM; an env's own helper (a
    # simulator's server) inherited an ignored signal through its exec, and outlived
    # `terminate()`, the env's close and the run.
    with external.ExternalProcess(mock.ChildSignals) as env:
        masks = env.call("child_signals")
    stops = (1 << signal.SIGINT - 1) | (1 << signal.SIGTERM - 1)
    assert masks["SigIgn"] & stops == 0 and masks["SigBlk"] & stops == 0, masks


# A job's Ctrl-C and SIGTERM that reach the fork server at once as it starts, then a
# process from it.
# Prints the signals a process blocks, as /proc lists them.
SHOW_BLOCKED = """
def show():
    print(next(line for line in open("/proc/self/status") if line.startswith("SigBlk")))
"""
SIGNALS_AS_THE_SERVER_STARTS = (
    """
import multiprocessing, os, signal
from batchrl.envs.host import lifecycle
"""
    + SHOW_BLOCKED
    + """
if __name__ == "__main__":
    context = lifecycle.context("forkserver")
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    os.kill(server, signal.SIGINT)
    os.kill(server, signal.SIGTERM)
    process = context.Process(target=show)
    process.start()
    process.join()
    os.kill(server, signal.SIGTERM)  # Once its preloads ran, and every thread they start.
    process = context.Process(target=show)
    process.start()
    process.join()
"""
)


def test_a_job_signal_as_the_fork_server_starts_leaves_it_serving_without_a_word(tmp_path):
    # Multiprocessing ignores Ctrl-C in the server only after its preloads: a job's Ctrl-C
    # in those seconds printed the server's traceback under the command's one line. And
    # the server's SIGTERM, blocked in its main thread alone, reached the thread numpy's
    # import starts (OpenBLAS's), whose default action ended the server and its workers.
    (tmp_path / "start.py").write_text(SIGNALS_AS_THE_SERVER_STARTS)
    done = subprocess.run(
        [sys.executable, "start.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line]
    assert len(lines) == 2, done.stdout
    for line in lines:  # Its processes take both as before.
        assert int(line.split()[-1], 16) & (1 << signal.SIGINT - 1 | 1 << signal.SIGTERM - 1) == 0


USERS_FORKSERVER = (
    """
import multiprocessing
import batchrl.envs  # At the top: a forkserver child of the user's imports it again.
"""
    + SHOW_BLOCKED
    + """
if __name__ == "__main__":
    process = multiprocessing.get_context("forkserver").Process(target=show)
    process.start()
    process.join()
"""
)


def test_importing_batchrl_leaves_sigterm_to_a_users_own_forkserver_processes(tmp_path):
    # They blocked SIGTERM, and every process they started (SB3's SubprocVecEnv's too).
    (tmp_path / "users.py").write_text(USERS_FORKSERVER)
    done = subprocess.run(
        [sys.executable, "users.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    blocked = int(done.stdout.split()[-1], 16)
    assert blocked & (1 << signal.SIGTERM - 1) == 0, done.stdout + done.stderr[-2000:]


def test_a_worker_a_ctrl_c_cut_off_is_replaced_by_the_next_reset(tmp_path):
    # Ctrl-C in a notebook's loop over `step`, then `reset`: a SyncVectorEnv goes on, an
    # AsyncVectorEnv stays stuck with its step in flight; the worker whose answer was cut
    # off is replaced, since its late answer would be read as the next call's.
    from batchrl.envs import BatchEnv
    from batchrl.testing import interrupt

    gate = str(tmp_path / "gate")
    make = functools.partial(mock.CountingEnv, duration=50, step_gate=gate)
    env = BatchEnv.external([make] * 4, envs_per_worker=2)
    try:
        env.reset(seed=0)
        held = [group.pid for group in env.groups]
        with pytest.raises(KeyboardInterrupt), interrupt.sigint_while_waiting():
            env.step(np.zeros((4, 2), np.float32))  # Every env held at the gate.
        pathlib.Path(gate).touch()
        with pytest.raises(errors.EnvError, match=r"interrupted while waiting for step \(a reset"):
            env.step(np.zeros((4, 2), np.float32))
        obs, _ = env.reset(seed=3)
        fresh = gym.vector.SyncVectorEnv([make] * 4)
        np.testing.assert_array_equal(obs, fresh.reset(seed=3)[0])
        np.testing.assert_array_equal(
            env.step(np.zeros((4, 2), np.float32))[0], fresh.step(np.zeros((4, 2)))[0]
        )
        assert not {group.pid for group in env.groups} & set(held)
        assert not wait_gone(held)
    finally:
        env.close()


def test_ctrl_c_in_a_later_workers_wait_leaves_a_batch_the_next_reset_mends(monkeypatch):
    # Ctrl-C while the batch waited on its second worker, the first's step collected: the
    # next step reached the first worker, was refused by the second, and left the first
    # with a step in flight; every reset after it was refused, the batch lost for good.
    from batchrl.testing import interrupt

    make = functools.partial(mock.CountingEnv, duration=50)
    env = BatchEnv.external([make] * 4, envs_per_worker=2)
    fresh = gym.vector.SyncVectorEnv([make] * 4)
    try:
        env.reset(seed=0)
        first, second = env.groups
        cut = interrupt.ctrl_c_at_call(monkeypatch, second, "_wait_answer", 1)
        with pytest.raises(KeyboardInterrupt), cut:
            env.step(np.zeros((4, 2), np.float32))
        with pytest.raises(errors.EnvError, match=r"interrupted while waiting for step \(a reset"):
            env.step(np.zeros((4, 2), np.float32))
        with pytest.raises(errors.EnvError, match=r"left with its step unanswered as another"):
            first.step_async(np.zeros((2, 2), np.float32))  # Abandoned when the step was refused.
        obs, _ = env.reset(seed=3)
        np.testing.assert_array_equal(obs, fresh.reset(seed=3)[0])
        np.testing.assert_array_equal(
            env.step(np.zeros((4, 2), np.float32))[0], fresh.step(np.zeros((4, 2)))[0]
        )
        # Ctrl-C while a request waited on the first worker: the second, asked too, is
        # not waited on, and neither answer is read as a later request's.
        cut = interrupt.ctrl_c_at_call(monkeypatch, first, "_receive_answer", 1)
        with pytest.raises(KeyboardInterrupt), cut:
            env.call("step", np.zeros(2, np.float32))
        obs, _ = env.reset(seed=5)
        np.testing.assert_array_equal(obs, fresh.reset(seed=5)[0])
        assert env.get_attr("steps") == (0, 0, 0, 0)
    finally:
        env.close()
        fresh.close()


def test_ctrl_c_is_not_held_a_second_for_each_worker_busy_in_a_step(tmp_path, monkeypatch):
    # Each retired worker was told to close, which it reads only once its step ends, and
    # killed 1 s later: 8 busy workers held the KeyboardInterrupt 8 s, 32 workers 32 s.
    # With that grace at 30 s, waiting on any one worker would take 30 s.
    from batchrl.envs import BatchEnv
    from batchrl.testing import interrupt

    monkeypatch.setattr(lifecycle, "CLOSE_TIMEOUT", 30.0)

    gate = str(tmp_path / "gate")  # Never opened: every step waits for it.
    make = functools.partial(mock.CountingEnv, duration=50, step_gate=gate)
    env = BatchEnv.external([make] * 8, envs_per_worker=1)
    try:
        env.reset(seed=0)
        held = [group.pid for group in env.groups]
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt), interrupt.sigint_while_waiting():
            env.step(np.zeros((8, 2), np.float32))
        assert time.monotonic() - start < 20.0  # Not 240 s: no worker waited on.
        assert not wait_gone(held)
    finally:
        env.close()


def test_a_constructor_that_cannot_be_sent_or_builds_no_env_is_one_line(tmp_path):
    # A bare "cannot pickle '_thread.lock' object" from cloudpickle, naming nothing; and a
    # str's "has no attribute 'observation_space'", after a close error of the str's own.
    lock = threading.Lock()

    def locked() -> gym.Env:
        with lock:
            return gym.make("Pendulum-v1")

    with pytest.raises(TypeError) as error:
        BatchEnv.external([lambda: gym.make("Pendulum-v1"), locked], envs_per_worker=1)
    assert str(error.value) == (
        "env 1's constructor from test_a_constructor_that_cannot_be_sent_or_builds_no_env_is_one_"
        "line.<locals>.locked cannot be sent to a worker process (TypeError: cannot pickle "
        "'_thread.lock' object): build what it holds inside it, or step it in this process "
        "(local_envs)"
    )
    with pytest.raises(ValueError, match=r"^restart must be True or False, got 'no'$"):
        BatchEnv.external("Pendulum-v1", 2, restart="no")  # A string is true: restarts on.
    vector = functools.partial(gym.make_vec, "Pendulum-v1", 2)
    for made, what in ((lambda: "not an env", "str"), (vector, "SyncVectorEnv")):
        with pytest.raises(errors.EnvRaisedError) as error:
            BatchEnv.external(made, 2)
        assert f"returned a {what}, not a gymnasium.Env" in str(error.value).splitlines()[0]


def test_a_worker_that_dies_as_the_batch_first_starts_is_not_told_to_restart():
    # "pass restart=True to replace crashed workers", which retries no first start.
    crash = functools.partial(mock.FailingEnv, where="init", how="exit")
    for restart in (False, True):
        with pytest.raises(errors.EnvCrashedError) as error:
            BatchEnv.external(crash, 1, restart=restart)
        assert str(error.value).endswith(
            "died (exit code 3) during start; a batch's first start is not retried: restarts "
            "replace workers that ran"
        )

"""BatchEnv.ray on a local two-node Ray cluster: the same results as local workers, failures."""

import ast
import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types

import gymnasium as gym
import numpy as np
import psutil
import pytest
import ray
from ray._private import state as ray_state

from batchrl.conftest import wait_gone
from batchrl.envs import BatchEnv, EnvCrashedError, EnvError, EnvRaisedError, EnvTimeoutError
from batchrl.envs.host import (
    action_trees_test,
    lifecycle,
    observation_mode_test,
    spaces_test,
    variable_spaces_test,
)
from batchrl.envs.ray import ray_group
from batchrl.scripts import train
from batchrl.testing import mock
from batchrl.training import metrics_log

# Ray joins the cluster started last on this machine: one test process runs every test
# that starts or joins one (`--dist loadgroup`, with the Ray blocks of docs_test.py).
# A cluster of two nodes takes seconds to start, and each test seconds on it: all are slow.
pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.slow]


def _hosts() -> list[types.SimpleNamespace]:
    """Our live actors (node_id, pid), from the cluster's own actor table.

    Read from the GCS, which records an actor dead when `ray.kill` returns; Ray's state API
    (`ray.util.state`) would ask the dashboard, which may not have come up yet.
    """
    return [
        types.SimpleNamespace(node_id=actor["Address"]["NodeID"], pid=actor["Pid"])
        for actor in ray_state.actors(actor_state_name="ALIVE").values()
        if actor["ActorClassName"] == "Host"
    ]


def _counting(**kwargs):
    return functools.partial(mock.CountingEnv, **kwargs)


def _assert_same_step(ours, theirs):
    for a, b in zip(ours[:4], theirs[:4], strict=True):
        np.testing.assert_array_equal(a, b)
    assert ours[4].keys() == theirs[4].keys()
    for key in ours[4]:
        np.testing.assert_array_equal(ours[4][key], theirs[4][key])


@pytest.mark.parametrize("mode", spaces_test.MODES, ids=[m.name for m in spaces_test.MODES])
def test_observation_trees_cross_the_actors_as_sync_vector_env_gives_them(cluster, mode):
    makers = spaces_test.constructors(spaces_test.NESTED)
    with BatchEnv.ray(makers, actors=2, local_envs=1, autoreset_mode=mode) as on_ray:
        ends = spaces_test.run_like_sync(on_ray, makers, mode)
        obs = on_ray.reset_at([3, 1], seed=[4, 5])[0]
        spaces_test.assert_dtypes_kept(obs, spaces_test.NESTED)
        assert list(obs) == list(spaces_test.NESTED.spaces)
    assert ends >= 12


def test_action_trees_cross_the_actors_as_sync_vector_env_takes_them(cluster):
    space = action_trees_test.ACTION_SPACES["nested"]
    make = functools.partial(mock.ActionEcho, space)
    theirs = gym.vector.SyncVectorEnv([make] * 4)
    with BatchEnv.ray([make] * 4, actors=2) as on_ray, contextlib.closing(theirs):
        on_ray.reset(seed=0), theirs.reset(seed=0)
        theirs.action_space.seed(2)
        for _ in range(6):  # ActionEcho observes each action it was given.
            actions = theirs.action_space.sample()
            _assert_same_step(on_ray.step(actions), theirs.step(actions))


def test_spaces_of_no_fixed_shape_cross_the_actors_as_sync_vector_env_gives_them(cluster):
    makers = variable_spaces_test.echoes(variable_spaces_test.VARIABLE["nested"])
    mode = spaces_test.MODES[1]  # Same-step: the final observations cross in the infos.
    with BatchEnv.ray(makers, actors=2, local_envs=1, autoreset_mode=mode) as on_ray:
        assert spaces_test.run_like_sync(on_ray, makers, mode) >= 8


def test_observation_mode_different_batches_the_actors_envs_as_sync_vector_env(cluster):
    def on_ray(fns, **kwargs):
        return BatchEnv.ray(fns, actors=2, **kwargs)

    observation_mode_test.test_different_bounds_batch_and_step_as_sync_vector_env_does(on_ray)
    with pytest.raises(observation_mode_test.SpaceMismatchError, match="not equivalent"):
        on_ray(observation_mode_test.makers(observation_mode_test.BOUNDED))


def test_steps_as_local_workers_do_with_actors_on_both_nodes(cluster):
    rng = np.random.default_rng(0)
    with (
        BatchEnv.ray("Hopper-v5", 6) as on_ray,
        BatchEnv.external("Hopper-v5", 6, envs_per_worker=3) as local,
    ):
        assert {actor.node_id for actor in _hosts()} == set(ray_group.alive_nodes())
        np.testing.assert_array_equal(on_ray.reset(seed=5)[0], local.reset(seed=5)[0])
        ended = 0
        for _ in range(300):  # Random Hopper episodes end after 20-80 steps and autoreset.
            actions = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
            ours, theirs = on_ray.step(actions), local.step(actions)
            _assert_same_step(ours, theirs)
            ended += int(np.sum(ours[2] | ours[3]))
        assert ended > 6
        assert on_ray.get_attr("spec")[0].id == "Hopper-v5"
        (ours,), (theirs,) = (e.call("reset", seed=1, indices=[4]) for e in (on_ray, local))
        np.testing.assert_array_equal(ours[0], theirs[0])
        assert on_ray.restarts == 0


def test_infos_are_fetched_when_read_and_after_later_steps(cluster):
    with BatchEnv.ray(_counting(duration=2), 4, actors=2) as env:
        env.reset(seed=0)
        first = env.step(np.zeros((4, 2), np.float32))
        env.step(np.zeros((4, 2), np.float32))
        env.step(np.zeros((4, 2), np.float32))  # The actors drop the first step's infos here.
        assert first[4] == {}  # CountingEnv's steps report no info.
        _, infos = env.reset(seed=[7, 8, 9, 10])
        np.testing.assert_array_equal(infos["seed"], [7, 8, 9, 10])


def test_infos_read_at_once_come_in_the_steps_answer(cluster):
    # They took a second call per actor per step, which cost as much again, and an actor
    # lost between the two calls lost a step it had answered ("died during infos").
    actions = np.random.default_rng(0).uniform(-1, 1, (2, 3)).astype(np.float32)

    def step(env):
        env.reset(seed=3)
        results = (np.empty((2, 11)), np.empty(2), np.empty(2, bool), np.empty(2, bool))
        return env.step_into(actions, *results, read_infos=True)

    with BatchEnv.ray("Hopper-v5", 2, actors=1) as on_ray:
        ours = step(on_ray)
        actor = _hosts()[0].pid
        os.kill(actor, signal.SIGKILL)
        assert wait_gone([actor]) == []
        ours = list(ours)  # Read once the actor is gone.
    with BatchEnv.external("Hopper-v5", 2) as local:
        theirs = list(step(local))
    assert ours == theirs
    assert "x_position" in ours[0]


def test_an_env_exception_keeps_the_workers_traceback(cluster):
    failing = functools.partial(mock.FailingEnv, where="step", how="raise", at=2)
    with BatchEnv.ray(failing, 2, actors=2) as env:
        env.reset(seed=0)
        env.step(np.zeros((2, 2), np.float32))
        with pytest.raises(EnvRaisedError, match="FailingEnv failed on purpose") as caught:
            env.step(np.zeros((2, 2), np.float32))
        assert caught.value.error_type == "ValueError"
        assert "_maybe_fail" in caught.value.remote_traceback
        # Its worker's pid is on the actor's node, which the first line names.
        first = str(caught.value).splitlines()[0]
        node = r"\(in the Ray actor on node [0-9a-f]{8}\)$"
        assert re.search(r"worker pid \d+\) during step at \S+mock\.py:\d+\) " + node, first), first
        env.reset(seed=1)  # The batch steps on, each later step's infos its own.
        for _ in range(3):
            assert env.step(np.zeros((2, 2), np.float32))[4] == {}


def test_a_worker_that_dies_in_an_actor_is_named_with_the_actors_node(cluster):
    dying = functools.partial(mock.FailingEnv, where="step", how="sigkill", at=2)
    with BatchEnv.ray(dying, 2, actors=1) as env:
        env.reset(seed=0)
        env.step(np.zeros((2, 2), np.float32))
        where = r"worker pid \d+\) died .*\(in the Ray actor on node [0-9a-f]{8}\)$"
        with pytest.raises(EnvCrashedError, match=where):
            env.step(np.zeros((2, 2), np.float32))


def test_an_env_that_fails_to_start_is_named(cluster):
    failing = functools.partial(mock.FailingEnv, where="init", how="raise")
    with pytest.raises(EnvRaisedError, match="FailingEnv failed on purpose in init"):
        BatchEnv.ray(failing, 2, actors=2)
    # An env the actor builds in its own process raises there, not in a worker.
    with pytest.raises(EnvRaisedError, match="FailingEnv failed on purpose in init"):
        BatchEnv.ray([_counting(), failing], actors=1, local_envs=1)
    assert _hosts() == []


@pytest.mark.parametrize("asks", [{"num_cpus": 64}, {"resources": {"tpu_pod": 1}}])
def test_actor_options_no_node_can_hold_are_named_without_restart_advice(cluster, asks):
    # Restarting cannot help: the node has not what the actor asks for.
    words = r"cannot start: Ray cannot place the actor on its node, which lacks the resources"
    with pytest.raises(EnvCrashedError, match=words) as raised:
        BatchEnv.ray("Pendulum-v1", 2, actors=2, actor_options=asks)
    assert str(next(iter(asks.values()))) in str(raised.value)
    assert "restart" not in str(raised.value)
    assert _hosts() == []


def test_a_killed_actor_is_a_crash_and_close_leaves_nothing(cluster):
    env = BatchEnv.ray(_counting(duration=4), 4, actors=2)
    env.reset(seed=0)
    victim = _hosts()[0]
    os.kill(victim.pid, signal.SIGKILL)
    with pytest.raises(EnvCrashedError, match="died during step"):
        env.step(np.zeros((4, 2), np.float32))
    with pytest.raises(EnvError, match="unusable after"):
        env.step(np.zeros((4, 2), np.float32))
    survivors = [psutil.Process(actor.pid) for actor in _hosts()]
    workers = [child.pid for actor in survivors for child in actor.children(recursive=True)]
    env.close()
    assert wait_gone([actor.pid for actor in survivors] + workers) == []
    assert _hosts() == []


def test_a_hung_actor_times_out(cluster):
    env = BatchEnv.ray(_counting(duration=4), 2, actors=1, timeout=0.5)
    env.reset(seed=0)
    actor = _hosts()[0]
    os.kill(actor.pid, signal.SIGSTOP)
    try:
        with pytest.raises(EnvTimeoutError, match=r"did not answer step within 5\.5 s"):
            env.step(np.zeros((2, 2), np.float32))
    finally:
        with contextlib.suppress(ProcessLookupError):  # Killed by then, unless it failed.
            os.kill(actor.pid, signal.SIGCONT)
        env.close()
    assert wait_gone([actor.pid]) == []


@pytest.mark.parametrize("where", ["step", "reset"])
def test_actors_that_all_hang_time_out_together_not_one_after_another(cluster, monkeypatch, where):
    # The batch sends each actor its call before it waits for any, so every actor's wait
    # ends at one deadline: two hung actors hold it one timeout, not two.
    env = BatchEnv.ray(_counting(duration=50), 2, actors=2)
    env.reset(seed=0)
    env.step(np.zeros((2, 2), np.float32))
    pids = [group.pid for group in env.groups]
    for group in env.groups:  # Short only now: a loaded machine's slow start is no hang.
        group._wait = 1.0
    waits = []

    def recorded(wait):
        def call(*args, timeout=None, **kwargs):
            waits.append(timeout)
            return wait(*args, timeout=timeout, **kwargs)

        return call

    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        monkeypatch.setattr(ray, "get", recorded(ray.get))
        monkeypatch.setattr(ray, "wait", recorded(ray.wait))
        with pytest.raises(EnvTimeoutError, match=f"did not answer {where} within 1.0 s"):
            if where == "step":
                env.step(np.zeros((2, 2), np.float32))
            else:
                env.reset(seed=1)
        monkeypatch.undo()
        # The first waits what is left of its timeout; the second, sent before it ended,
        # what is left after it: far under a timeout of its own (1.0 before).
        assert len(waits) == 2 and 0 < waits[0] <= 1.0, waits
        assert waits[1] < 0.5, waits
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # Killed by then, unless it failed.
                os.kill(pid, signal.SIGCONT)
        env.close()
    assert wait_gone(pids) == []


@pytest.mark.parametrize("graceful", [True, False], ids=["removed", "killed"])
def test_a_lost_node_is_replaced_with_restart_and_the_run_goes_on(cluster, graceful):
    # Killed, the node was still listed live: its replacement went there, died with it,
    # and the batch stopped.
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    env = None
    try:
        env = BatchEnv.ray(_counting(duration=50), 3, restart=True)  # One actor per node.
        env.reset(seed=10)
        zeros = np.zeros((3, 2), np.float32)
        env.step(zeros)
        (pid,) = [actor.pid for actor in _hosts() if actor.node_id == node.node_id]
        # Actor k (env k here) goes to the k-th live node in the order of their ids.
        index = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]).index(node.node_id)
        cluster.remove_node(node, allow_graceful=graceful)
        assert not wait_gone([pid])  # Killed, the node's processes end a moment later.
        obs, reward, terminated, truncated, infos = env.step(zeros)
        assert env.restarts == 1 if graceful else 1 <= env.restarts <= lifecycle.RESTART_TRIES
        assert truncated[index] and not terminated[index] and reward[index] == 0.0
        assert infos["restarted"][index] and infos["_restarted"].sum() == 1
        # Reseeded as a restarted worker is: from the seed, the env's index and the count.
        fresh = mock.CountingEnv(duration=50)
        expected, _ = fresh.reset(seed=lifecycle.restart_seed(10 + index, index, env.restarts))
        np.testing.assert_array_equal(obs[index], expected)
        assert (obs[np.arange(3) != index, 0] == 2).all()  # The others stepped on.
        obs, *_ = env.step(zeros)
        assert obs[index, 0] == 1 and (obs[np.arange(3) != index, 0] == 3).all()
        assert {actor.node_id for actor in _hosts()} <= set(ray_group.alive_nodes())
    finally:
        if env is not None:
            env.close()
        if node in cluster.worker_nodes:
            cluster.remove_node(node)


def test_each_actor_is_its_raylets_child_which_its_watch_checks(cluster):
    # `raylet_watch` ends an actor whose parent dies (raylet_watch_test.py): the parent it
    # watches must be its node's raylet, not a process of Ray's that outlives it.
    raylets = {
        node.node_id: node.all_processes["raylet"][0].process.pid
        for node in [cluster.head_node, *cluster.worker_nodes]
    }
    with BatchEnv.ray(_counting(duration=50), 2):  # One actor per node.
        hosts = _hosts()
        assert len(hosts) == 2
        for host in hosts:
            assert psutil.Process(host.pid).ppid() == raylets[host.node_id]


def test_bad_actor_counts_are_named(cluster):
    with pytest.raises(ValueError, match="actors must be between 1 and num_envs=2, got 3"):
        BatchEnv.ray("Pendulum-v1", 2, actors=3)
    with pytest.raises(ValueError, match="actors must be between 1 and num_envs=2, got 0"):
        BatchEnv.ray("Pendulum-v1", 2, actors=0)
    with pytest.raises(ValueError, match=r"actors must be between 1 and num_envs=2, got 1\.5"):
        BatchEnv.ray("Pendulum-v1", 2, actors=1.5)
    with pytest.raises(ValueError, match="fewer than the cluster's 2 nodes: pass actors from 1"):
        BatchEnv.ray("Pendulum-v1", 1)
    assert _hosts() == []


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"envs_per_worker": 0}, "envs_per_worker must be a whole number of at least 1, got 0"),
        ({"local_envs": 3}, r"local_envs applies per actor: .* from 0 to 2 .*, got 3$"),
        ({"local_envs": "all"}, r"local_envs applies per actor: .* or 'auto', got 'all'$"),
        # A string is true: "no" had turned restarts on.
        ({"restart": "no"}, r"^restart must be True or False, got 'no'$"),
        # dict()'s "dictionary update sequence element #0 has length 8; 2 is required".
        ({"actor_options": ["num_cpus"]}, r"^actor_options is a dict of Ray's actor options"),
    ],
)
def test_bad_worker_layouts_are_named_as_arguments_not_as_an_envs_failure(cluster, given, words):
    # Five envs on two actors: shares of 2 and 3, so local_envs fits each at most 2.
    with pytest.raises(ValueError, match=words) as raised:
        BatchEnv.ray("Pendulum-v1", 5, actors=2, **given)
    assert not isinstance(raised.value, EnvError)
    assert _hosts() == []


def test_a_constructor_that_cannot_be_sent_to_an_actor_is_named(cluster):
    # cloudpickle's bare "cannot pickle '_thread.lock' object", as workers' once was.
    lock = threading.Lock()

    def locked() -> gym.Env:
        with lock:
            return gym.make("Pendulum-v1")

    with pytest.raises(TypeError) as error:
        BatchEnv.ray([lambda: gym.make("Pendulum-v1"), locked], actors=1)
    assert str(error.value) == (
        "env 1's constructor from test_a_constructor_that_cannot_be_sent_to_an_actor_is_named."
        "<locals>.locked cannot be sent to a Ray actor (TypeError: cannot pickle '_thread.lock' "
        "object): build what it holds inside it"
    )
    assert _hosts() == []


def test_the_train_command_runs_on_the_cluster_as_on_local_workers(cluster, tmp_path):
    # One phase of one update (4 episodes of 50 steps on 4 envs), and its evaluation.
    tiny = ["--config", "pendulum", "--set", "steps=200", "--set", "eval_episodes=4"]
    tiny += ["--set", "num_envs=4", "--set", "update_every=4", "--set", "max_length=50"]
    command = [sys.executable, "-m", "batchrl.scripts.train", "--logdir", str(tmp_path / "ray")]
    on_ray = subprocess.run(
        [*command, *tiny, "--set", "backend=ray"],
        env={**os.environ, "RAY_ADDRESS": cluster.address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert train.main(["--logdir", str(tmp_path / "local"), *tiny]) == 0
    (ray_run,), (local_run,) = ((tmp_path / k).iterdir() for k in ("ray", "local"))
    ours, theirs = (metrics_log.read_jsonl(run / "metrics.jsonl") for run in (ray_run, local_run))
    assert [row["step"] for row in ours] == [200]
    assert "eval/return" in ours[-1]
    learned = lambda row: {k: v for k, v in row.items() if not k.startswith("perf/")}  # noqa: E731
    assert [learned(row) for row in ours] == [learned(row) for row in theirs]
    assert _hosts() == []


def _with_a_ray_of_its_own(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`command` run to its end, starting a local Ray of its own, not joining the test's.

    Its own Ray folder (short: Ray's socket paths must fit 107 bytes), so that it cannot
    find the test cluster as the latest Ray started on this machine.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    session = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        return subprocess.run(
            command,
            env={**env, "RAY_TMPDIR": session},
            capture_output=True,
            text=True,
            timeout=300,
            **kwargs,
        )
    finally:
        shutil.rmtree(session, ignore_errors=True)


def test_without_a_cluster_it_starts_a_local_ray_and_stops_it_at_close(tmp_path):
    # JAX runs before Ray starts, as in the train command: no fork warning for Ray's starts.
    script = (
        "import jax\n"
        "import ray\n"
        "from batchrl.envs import BatchEnv\n"
        "if __name__ == '__main__':\n"
        "    jax.devices()\n"
        "    env = BatchEnv.ray('Pendulum-v1', 2)\n"
        "    env.reset(seed=0)\n"
        "    reward = env.step(env.action_space.sample())[1]\n"
        "    print(ray.is_initialized(), len(ray.nodes()), reward.shape)\n"
        "    print(repr(ray._private.worker._global_node.webui_url))\n"
        "    env.close()\n"
        "    print(ray.is_initialized())\n"
    )
    (tmp_path / "start.py").write_text(script)
    result = _with_a_ray_of_its_own([sys.executable, "start.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    started, dashboard, stopped = result.stdout.splitlines()[-3:]
    assert started == "True 1 (2,)"
    assert dashboard in ("None", "''")  # No web UI for a Ray the run starts and stops.
    assert "os.fork" not in result.stderr, result.stderr[-3000:]
    assert stopped == "False"


def test_a_batch_open_when_ray_is_shut_down_says_so_and_closes_without_a_new_ray():
    # Each call started a fresh Ray of its own, dashboard and all, then failed with Ray's
    # bare Exception "Can't find actor", close among them.
    script = (
        "import numpy as np, ray\n"
        "from batchrl.envs import BatchEnv, EnvError\n"
        "if __name__ == '__main__':\n"
        "    env = BatchEnv.ray('Pendulum-v1', 2)\n"
        "    env.reset(seed=0)\n"
        "    ray.shutdown()\n"
        "    for _ in range(2):\n"
        "        try:\n"
        "            env.step(np.zeros((2, 1), np.float32))\n"
        "        except EnvError as error:\n"
        "            print(error)\n"
        "    env.close()\n"
        "    print(ray.is_initialized())\n"
    )
    result = _with_a_ray_of_its_own([sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr[-3000:]
    first, then, started = result.stdout.splitlines()[-3:]
    gone = r"^env 'Pendulum-v1' \(envs 0-1, Ray actor on node \w{8}\) is gone: Ray was shut down "
    assert re.match(gone + r"\(ray\.shutdown\(\)\) while the batch was open; close", first)
    assert then.endswith("is unusable after: Ray was shut down"), then
    assert started == "False"
    assert "Started a local Ray instance" not in result.stderr


# Starts a local Ray and presses Ctrl-C once Ray's agents run, before `ray.init` returns;
# prints the Ray processes it saw, then how the join ended.
CTRL_C_WHILE_RAY_STARTS = """
import signal, sys, threading, time
import psutil
from batchrl.envs.ray import ray_group

main, seen = threading.main_thread().ident, {}

def press():
    while not any(p.name() == "ray::RuntimeEnvAgent" for p in seen.values()):
        for child in psutil.Process().children(recursive=True):
            seen[child.pid] = child
        time.sleep(0.01)
    signal.pthread_kill(main, signal.SIGINT)

threading.Thread(target=press, daemon=True).start()
try:
    ray_group.SESSION.join()
    print(list(seen), "joined")
except KeyboardInterrupt:
    print(list(seen), "interrupted")
"""


def test_ctrl_c_while_ray_starts_stops_once_started_and_leaves_no_ray_process():
    # Raised inside ray.init, the interrupt left Ray's dashboard and runtime-env agents
    # running a minute or two after the program ended.
    result = _with_a_ray_of_its_own([sys.executable, "-c", CTRL_C_WHILE_RAY_STARTS])
    assert result.returncode == 0, result.stderr[-3000:]
    seen, ended = result.stdout.splitlines()[-1].rsplit(" ", 1)
    assert ended == "interrupted"
    assert wait_gone(ast.literal_eval(seen), seconds=20) == []
    assert "batchrl: SIGINT: stopping when Ray has started; again to stop now" in result.stderr

"""Shared test fixtures: every test must leave no child process behind; slow tests first.

The test session keeps XLA's compiled programs in a persistent cache that it, its test
processes (pytest-xdist's workers) and the runs they start share: many tests compile the
same small programs, in test processes and in `train` or `sweep` subprocesses, and a
cache hit turns an 18 s subprocess run into 5 s.
A cached program is the one XLA would compile again, so results are unchanged.

Most tests compile more than they run: XLA compiles their programs with little
optimisation (`jax_disable_most_optimizations`: LLVM at -O0, the same HLO passes), which
takes a third less time. Tests that run long, the learning ones, are marked `optimized`
and compile as a user's run does, in their own process and in the runs they start.
XLA:CPU's fusion emitters are off for the whole session where this XLA can turn them off
(`_QUICK_CODEGEN`): its older emitters compile the tests' programs in half the time. They
run a user's training slower (`cheetah_clipped`: 0.69-0.71x), which tests that compile
more than they run do not feel (the Pendulum learning test took 24 s against 27 s).
Tests that compare, to the bit, programs split differently compile with XLA's own
emitters (`xla_flags_as_users`). XLA:CPU compiles each program as one LLVM module, not
split for threads (`_ONE_MODULE`): the suite's test processes keep the cores busy, and
the parts cost more than they save (phase_test and three other files, two test
processes: 175-177 s against 182-191 s).

Tests press Ctrl-C on the runs they start, as a user at a terminal would. A suite started
as a background job (`pytest &`, `nohup`) inherits SIGINT ignored and would pass that on
to every run it starts, so the session takes SIGINT back first.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

# Every program is cached, however quick to compile or small.
_CACHE_EVERYTHING = {
    "jax_persistent_cache_min_compile_time_secs": 0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}
_QUICK_COMPILE = "jax_disable_most_optimizations"
_QUICK_CODEGEN = "--xla_cpu_use_fusion_emitters=false"
_ONE_MODULE = "--xla_cpu_parallel_codegen_split_count=1"
_CACHE_KEY = pytest.StashKey[str]()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one test process more than the cores, as xdist counts them.

    Tests wait on what they start (runs, env workers, Ray's actors and nodes) and a third
    process on two cores is there to fill those waits. A fresh clone's suite, 2 cores, passed in
    968 s and 1,053 s in two runs with three against 996-1,087 s in five runs with two:
    within this machine's noise, and never slower.
    PYTEST_XDIST_AUTO_NUM_WORKERS still says how many, as xdist's own count reads it.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return (psutil.cpu_count(logical=False) or psutil.cpu_count() or 1) + 1


def pytest_configure(config: pytest.Config) -> None:
    """Takes SIGINT back; the tree under test first on the runs' path; one compilation cache."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # Python's own handler, as when started at a terminal; children get the default.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _tree_first_on_path()
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        # The caller chose a cache, or this is an xdist worker: the session's controller
        # made the cache before starting it, and the worker's JAX reads these variables.
        return
    directory = tempfile.mkdtemp(prefix="batchrl-test-xla-cache-")
    config.stash[_CACHE_KEY] = directory
    # Stable-Baselines3 makes a log folder for every `learn` (SB3-<time> in /tmp unless
    # told): the tests' go beside the cache, and go with it.
    os.environ["SB3_LOGDIR"] = tempfile.mkdtemp(prefix="sb3-", dir=directory)
    settings = {"jax_compilation_cache_dir": directory, **_CACHE_EVERYTHING, _QUICK_COMPILE: True}
    # JAX reads each setting from its upper-case environment variable: runs started
    # by tests inherit them; this process is told directly.
    os.environ.update({name.upper(): str(value) for name, value in settings.items()})
    # Both in one probe; each alone where this XLA does not know both.
    for flags in ([_QUICK_CODEGEN, _ONE_MODULE], [_QUICK_CODEGEN], [_ONE_MODULE]):
        joined = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()
        if _xla_accepts(joined):
            os.environ["XLA_FLAGS"] = joined
            break
    import jax

    for name, value in settings.items():
        jax.config.update(name, value)


def _tree_first_on_path() -> None:
    """Puts the tree these tests are in first on PYTHONPATH, for every process they start.

    Tests start runs, workers, Ray's nodes and doc blocks as subprocesses, which import
    batchrl from wherever it is installed: a checkout tested beside an editable install
    of another tested that other's code there, and one whose install had moved away
    failed 33 tests on `No module named 'batchrl'`.
    """
    root = str(pathlib.Path(__file__).resolve().parents[1])
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if paths[0] != root:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, *paths]))


def _xla_accepts(flags: str) -> bool:
    """Whether this XLA starts with `flags` (it aborts on a flag it does not know)."""
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(probe, env=env, capture_output=True, timeout=120).returncode == 0


def xla_flags_as_users(*flags: str) -> str:
    """XLA_FLAGS for a run that must compile with XLA's own emitters, plus `flags`.

    Programs split differently (one device's program, or acting's and learning's on two)
    round alike to the bit with XLA's own emitters, not with the older ones.
    """
    kept = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if flag != _QUICK_CODEGEN]
    return " ".join([*kept, *flags])


def pytest_unconfigure(config: pytest.Config) -> None:
    """Removes the session's compilation cache."""
    directory = config.stash.get(_CACHE_KEY, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first, so that the test processes end together, not on one long test.

    pytest-xdist hands out tests (and each `xdist_group` whole) in collection order; a
    minute-long test handed out last leaves the other cores idle while it runs.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# multiprocessing's own helpers: one per parent, they exit when the parent does. Workers
# forked from a fork server carry its command line too, and are not helpers.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
# Ray's own processes (the cluster a test starts, its idle workers and agents); an actor
# of ours shows as "ray::Host" and counts.
_RAY = ("site-packages/ray/", "ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _command(process: psutil.Process) -> str:
    return " ".join(process.cmdline())


def _counted(process: psutil.Process) -> bool:
    """Whether a running descendant is one a test must not leave behind."""
    if process.status() == psutil.STATUS_ZOMBIE:
        return False
    command = _command(process)
    if any(ray in command for ray in _RAY):
        return False
    if any(helper in command for helper in _HELPERS):
        parent = process.parent()
        return parent is not None and "multiprocessing.forkserver" in _command(parent)
    return True


def live_children() -> list[psutil.Process]:
    """This process's running descendants, but multiprocessing's helpers and Ray's own."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if _counted(child):
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(pids: list[int], seconds: float = 60.0) -> list[int]:
    """Waits until none of `pids` runs; returns those still running after `seconds`.

    `seconds` only ends a failing wait: a closed or killed process is gone in
    milliseconds, which a loaded machine can stretch to seconds but not to a minute.
    """
    deadline = time.monotonic() + seconds
    while True:
        running = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    running.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def compiled_as_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Compiles an `optimized` test's programs, and its runs', with XLA's full optimisation."""
    if request.node.get_closest_marker("optimized") is None:
        yield
        return
    import jax

    quick = jax.config.read(_QUICK_COMPILE)
    monkeypatch.setenv(_QUICK_COMPILE.upper(), "0")
    jax.config.update(_QUICK_COMPILE, False)
    jax.clear_caches()  # Programs compiled before, quickly, would be used again.
    try:
        yield
    finally:
        jax.config.update(_QUICK_COMPILE, quick)


@pytest.fixture(autouse=True)
def no_orphans():
    """Fails a test that leaves a worker process running after it ends."""
    before = {p.pid for p in live_children()}
    yield
    left = wait_gone([p.pid for p in live_children() if p.pid not in before])
    assert not left, f"test left processes running: {left}"


@pytest.fixture(scope="module")
def cluster():
    """A two-node Ray cluster on this machine, one CPU a node, joined by this process.

    Ray joins the cluster started last on the machine: every test that starts or joins one
    runs in one test process (its `xdist_group("ray")`). No dashboard: nothing reads it,
    and it is two more Python processes to start.
    """
    import ray
    from ray.cluster_utils import Cluster

    # Ray starts its workers (our actors, and the env workers they fork) at nice 15: on a
    # busy machine the suite's other processes starved them past their 120 s to start.
    head = {"num_cpus": 1, "include_dashboard": False, "_system_config": {"worker_niceness": 0}}
    started = Cluster(initialize_head=True, head_node_args=head)
    started.add_node(num_cpus=1)
    started.wait_for_nodes()
    ray.init(address=started.address, logging_level="ERROR")
    yield started
    ray.shutdown()
    started.shutdown()

"""A loaded policy where a deployer puts it: threads, pools, x64 apps, one phase's file."""

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import batchrl
from batchrl.training import api_test, checkpoint, run_folder

TINY = api_test.TINY_PENALTY
OBS = np.array([0.6, -0.8, 1.5], np.float32)
pytestmark = pytest.mark.xdist_group("policy_test")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> batchrl.Run:
    logdir = tmp_path_factory.mktemp("runs")
    return batchrl.train("pendulum_jax", steps=600, logdir=logdir, keep_checkpoints=5, **TINY)


def test_threads_sharing_a_policy_each_draw_samples_of_their_own(run):
    # Each call read the key and set the next: two threads read one key, drew one sample.
    policy = batchrl.load(run.rundir)

    def draws(_: int) -> list[float]:
        return [float(policy.act(OBS, deterministic=False)[0]) for _ in range(100)]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        threaded = [draw for part in pool.map(draws, range(8)) for draw in part]
    inside = [draw for draw in threaded if abs(draw) < 2.0]  # Not clipped to the bounds.
    assert len(set(inside)) == len(inside) > 400
    # The same 800 draws as one thread makes, in some order.
    alone = batchrl.load(run.rundir)
    assert sorted(threaded) == sorted(float(alone.act(OBS, False)[0]) for _ in range(800))


def test_an_infinite_or_float32_overflowing_observation_is_refused_in_one_line(run):
    policy = batchrl.load(run.rundir)
    with pytest.raises(ValueError, match=r"^obs holds inf: the policy acts on finite .* nan$"):
        policy.act(np.array([np.inf, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"^obs holds -inf: "):
        policy.act(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, -np.inf]]), deterministic=False)
    # Finite in float64, inf once cast to the float32 the policy computes in.
    with pytest.raises(ValueError, match=r"^obs holds 1e\+39, beyond float32's range, in"):
        policy.act(np.array([1e39, 0.0, 0.0]))
    assert np.isfinite(policy.act(np.array([3e38, 0.0, 0.0]))).all()


def test_a_policy_loads_and_acts_alike_in_an_app_with_jax_x64_on(run):
    # x64 traced the template's floats as float64: "structure mismatch", every checkpoint.
    code = (
        "import sys, numpy as np, batchrl\n"
        "policy = batchrl.load(sys.argv[1])\n"
        "print(repr(float(policy.act(np.array([0.6, -0.8, 1.5], np.float32))[0])))\n"
    )
    environ = {**os.environ, "JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(run.rundir)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    here = float(batchrl.load(run.rundir).act(OBS)[0])
    assert float(done.stdout.split()[-1]) == pytest.approx(here, abs=1e-5)


def _act(policy: batchrl.Policy) -> np.ndarray:
    return policy.act(OBS)


# The fork is the point: JAX (and Python 3.12) warn of it as the refusal says it, in one line.
@pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning")
@pytest.mark.filterwarnings(
    r"ignore:This process .* is multi-threaded, use of fork\(\):DeprecationWarning"
)
def test_a_fork_pool_is_refused_in_one_line_where_it_would_hang_and_spawn_acts(run):
    policy = batchrl.load(run.rundir)
    policy.act(OBS)  # JAX's threads run here: a forked child would wait on them forever.
    forked = multiprocessing.get_context("fork").Pool(1)
    with forked, pytest.raises(RuntimeError, match=r"^this process was forked from one where"):
        forked.apply_async(_act, (policy,)).get(timeout=120)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply_async(_act, (policy,)).get(timeout=300)
    np.testing.assert_array_equal(there, policy.act(OBS))


def test_load_takes_one_phase_checkpoint_file_of_a_run(run):
    directory = run_folder.checkpoints(run.rundir)
    first, *_, last = checkpoint.steps(directory)
    older = batchrl.load(checkpoint.path_for(directory, first))
    newest = batchrl.load(checkpoint.path_for(directory, last))
    leaves = [jax.tree.leaves(p.learner.params) for p in (older, newest)]
    assert any(not np.array_equal(a, b) for a, b in zip(*leaves, strict=True))
    for a, b in zip(
        leaves[1], jax.tree.leaves(batchrl.load(run.rundir).learner.params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert older.config == run_folder.read_config(run.rundir)
    with pytest.raises(ValueError, match=r"^give a checkpoint file or best=True, not both"):
        batchrl.load(checkpoint.path_for(directory, first), best=True)
    # Another file of the folder is still not a run folder.
    with pytest.raises(run_folder.RunFolderError, match=r"is a file, not a run folder"):
        batchrl.load(run_folder.metrics(run.rundir))


def test_load_lists_again_when_a_run_training_on_removes_the_checkpoint_it_listed(run, monkeypatch):
    # With keep_checkpoints=1 the one file listed was replaced before it was read: "none of
    # the 1 checkpoints loads", as if the run's checkpoints were corrupt.
    directory = run_folder.checkpoints(run.rundir)
    listed = checkpoint.steps(directory)
    gone = listed[-1] + 10**9  # Listed, then rotated away by a newer one.
    calls = []

    def steps(folder):
        calls.append(folder)
        return [gone] if len(calls) <= 2 else listed  # load's own look, then load_latest's.

    monkeypatch.setattr(checkpoint, "steps", steps)
    assert not checkpoint.path_for(directory, gone).exists()
    policy = batchrl.load(run.rundir)
    assert len(calls) == 3
    monkeypatch.undo()
    np.testing.assert_array_equal(policy.act(OBS), batchrl.load(run.rundir).act(OBS))

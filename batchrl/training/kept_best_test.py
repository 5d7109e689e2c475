import json
import shutil

import pytest

import batchrl
from batchrl.training import checkpoint, kept_best, metrics_log
from batchrl.training.api_test import TINY_PENALTY

TINY = dict(TINY_PENALTY, phase_steps=200, eval_every=1, keep_checkpoints=4)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return batchrl.train("pendulum_jax", steps=800, logdir=tmp_path_factory.mktemp("run"), **TINY)


def killed_after_a_later_best(finished, tmp_path):
    """A copy of `finished` as a kill left it between phase 4's best.bin and checkpoint.

    Phase 4 scored above every row there (on host envs a phase trained again scores
    anew): a resume from phase 3 kept that best.bin, of phases it no longer has.
    """
    rundir = tmp_path / finished.rundir.name
    shutil.copytree(finished.rundir, rundir)
    folder = rundir / "checkpoints"
    checkpoint.save_best(folder, 4, finished.state, kept_best.STORAGE, score=0.0)
    checkpoint.path_for(folder, 4).unlink()
    return rundir


def test_a_best_policy_of_a_phase_trained_again_is_set_aside_for_the_kept_best(
    finished, tmp_path, caplog
):
    rundir = killed_after_a_later_best(finished, tmp_path)
    best = rundir / "checkpoints" / checkpoint.BEST
    later = best.read_bytes()
    caplog.set_level("WARNING", logger="batchrl")
    batchrl.resume(rundir)
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert f"{best} holds phase 4, which the run trains again (it resumes after phase 3)" in said
    assert (best.parent / "skipped-best.bin").read_bytes() == later
    # The best up to phase 3 written from its checkpoint, then phase 4 trained again as
    # the run first did: the uninterrupted run's best policy.
    assert best.read_bytes() == (finished.rundir / "checkpoints" / checkpoint.BEST).read_bytes()


def test_a_best_phase_no_longer_kept_leaves_the_next_evaluation_kept(finished, tmp_path, caplog):
    rundir = killed_after_a_later_best(finished, tmp_path)
    rows = metrics_log.read_jsonl(rundir / "metrics.jsonl")
    rows[0]["eval/return"] = -1.0  # Phase 1 best of all, its checkpoint rotated away.
    (rundir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    checkpoint.path_for(rundir / "checkpoints", 1).unlink()
    caplog.set_level("WARNING", logger="batchrl")
    batchrl.resume(rundir)
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert "phase 1, the best evaluated before phase 4, is no longer kept: the next " in said
    best = rundir / "checkpoints" / checkpoint.BEST
    assert checkpoint.best_of(best) == (4, rows[3]["eval/return"])

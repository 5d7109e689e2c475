import math

import pytest

from batchrl import algorithm as algorithm_lib
from batchrl.configs import presets, train_config
from batchrl.envs.jax import classic, jax_env
from batchrl.training import checkpoint, keeper, loop, run_folder


@pytest.mark.parametrize("score", [math.nan, math.inf])
def test_an_evaluation_that_returned_no_finite_score_is_said_and_never_kept_best(
    tmp_path, caplog, score
):
    # Rewards NaN only under evaluation left "eval/return": null in the row, unsaid;
    # an infinite one was kept as the best policy.
    config = train_config.replace(presets.get("pendulum_jax"), num_envs=2, steps=400)
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), config.num_envs)
    _, state = loop.build(config, env)
    folder = run_folder.create(tmp_path, config, "pendulum_jax", "s0")
    kept = keeper.Keeper(folder, config, state, algorithm_lib.of(config.algorithm))
    kept.record(state.replace(phases=1), {"eval/return": score, "eval/count": 2.0})
    assert [record.getMessage() for record in caplog.records] == [
        f"phase 1's evaluation (seed 0) of 2 episodes returned {score}: the env's rewards "
        "under evaluation were not finite; none of it is kept as the best"
    ]
    assert not (run_folder.checkpoints(folder) / checkpoint.BEST).exists()
    caplog.clear()  # A phase that ended no episode was not evaluated: nothing to say.
    kept.record(state.replace(phases=2), {"eval/return": math.nan, "eval/count": 0.0})
    assert not caplog.records

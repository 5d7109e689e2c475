import dataclasses

import numpy as np
import pytest

import batchrl
from batchrl import algorithm as algorithm_lib
from batchrl.training import api_test, run_folder
from batchrl.training import policy as policy_lib

TINY = api_test.TINY_PENALTY
pytestmark = pytest.mark.xdist_group("policy_test")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> batchrl.Run:
    return batchrl.train("pendulum_jax", steps=400, logdir=tmp_path_factory.mktemp("runs"), **TINY)


def test_act_normalises_raw_observations_as_training_did_and_updates_nothing(run):
    policy = batchrl.load(run.rundir)
    norm = policy.learner.obs_norm
    # Every env step of training, none of the evaluation's, went into the normaliser.
    assert float(norm.count) == run.metrics[-1]["normalizer/count"] == 400
    obs = np.array([[0.6, -0.8, 1.5], [1.0, 0.0, -8.0]], np.float32)
    # The same parameters without a normaliser, given the observations as training scaled them.
    config = run_folder.read_config(run.rundir).algorithm
    algorithm = algorithm_lib.of(config)
    plain = dataclasses.replace(config, normalize_observations=False)
    reference = policy_lib.Policy(
        algorithm, algorithm.networks(plain, policy.env_spec), policy.learner
    )
    var = np.asarray(norm.var_sum) / (float(norm.count) - 1.0)
    scaled = np.clip((obs - np.asarray(norm.mean)) / np.sqrt(var), -5.0, 5.0)
    np.testing.assert_allclose(policy.act(obs), reference.act(scaled), atol=1e-6)
    assert not np.allclose(policy.act(obs), reference.act(obs), atol=1e-3)
    assert policy.learner.obs_norm is norm  # Acting left it as loaded.

import concurrent.futures
import dataclasses
import multiprocessing
import pickle
import re
import shutil

import gymnasium as gym
import numpy as np
import pytest

import batchrl
from batchrl import algorithm as algorithm_lib
from batchrl.configs import presets, train_config
from batchrl.envs import spaces
from batchrl.testing import cue, parameter_cue
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


def test_predict_samples_by_default_and_acts_as_act_when_deterministic(run):
    policy = batchrl.load(run.rundir)
    obs = np.array([[0.6, -0.8, 1.5], [1.0, 0.0, -8.0]], np.float32)
    action, state = policy.predict(obs, deterministic=True)
    assert state is None
    np.testing.assert_array_equal(action, policy.act(obs))
    sampled = [policy.predict(obs)[0] for _ in range(2)]  # SB3's default: not deterministic.
    assert not np.array_equal(sampled[0], sampled[1])
    assert not np.array_equal(sampled[0], action)
    # The mode draws nothing: a fresh policy samples the same after any deterministic calls.
    fresh = batchrl.load(run.rundir)
    fresh.act(obs), fresh.predict(obs, deterministic=True)
    np.testing.assert_array_equal(fresh.predict(obs)[0], batchrl.load(run.rundir).predict(obs)[0])
    # Another seed's draws; the run's own (0) by default.
    seeded = [batchrl.load(run.rundir, seed=seed).predict(obs)[0] for seed in (5, 5, 0)]
    np.testing.assert_array_equal(seeded[0], seeded[1])
    assert not np.array_equal(seeded[0], seeded[2])
    np.testing.assert_array_equal(seeded[2], batchrl.load(run.rundir).predict(obs)[0])
    with pytest.raises(ValueError, match=r"^seed must be in \[0, 2\*\*31\), got -1$"):
        batchrl.load(run.rundir, seed=-1)
    with pytest.raises(ValueError, match=r"^seed=True: expected int$"):
        batchrl.load(run.rundir, seed=True)
    # A string read from a flag or a file: "False" was true, the mean action taken.
    with pytest.raises(ValueError, match=r"^deterministic is True or False, got 'False'$"):
        policy.act(obs, deterministic="False")
    np.testing.assert_array_equal(policy.act(obs, deterministic=np.True_), action)


def test_a_policy_pickles_and_acts_in_another_process_as_here(run):
    # Its compiled functions are local objects: a process pool or a Ray task could not take it.
    policy = batchrl.load(run.rundir)
    obs = np.array([[0.6, -0.8, 1.5], [1.0, 0.0, -8.0]], np.float32)
    policy.predict(obs)  # A sample drawn: the key has moved on from the seed's.
    copy = pickle.loads(pickle.dumps(policy))
    np.testing.assert_array_equal(copy.act(obs), policy.act(obs))
    np.testing.assert_array_equal(copy.predict(obs)[0], policy.predict(obs)[0])  # Same draws.
    spawn = multiprocessing.get_context("spawn")  # No JAX state forked: all of it pickled.
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        there = pool.submit(policy.predict, obs).result(timeout=300)[0]  # A hang, not a race.
    np.testing.assert_array_equal(there, policy.predict(obs)[0])


def test_a_loaded_policy_tells_the_spaces_it_acts_in_as_gymnasiums_env_has_them(run, tmp_path):
    # Stable-Baselines3's model.observation_space: pendulum_jax's are Gymnasium Pendulum's.
    env = gym.make("Pendulum-v1")
    policy = batchrl.load(run.rundir)
    assert policy.observation_space == env.observation_space
    assert policy.action_space == env.action_space and policy.action_space.contains(
        policy.act(np.zeros(3, np.float32))
    )
    assert pickle.loads(pickle.dumps(policy)).observation_space == env.observation_space
    assert run.policy.action_space == env.action_space  # The run's own, in memory.
    # A folder written before runs kept their spaces: none to tell.
    older = shutil.copytree(run.rundir, tmp_path / run.rundir.name)
    (older / run_folder.SPACES).unlink()
    assert batchrl.load(older).observation_space is None
    assert batchrl.load(older).action_space is None
    batchrl.resume(older)  # Finished: it trains nothing, and keeps its spaces from now on.
    assert batchrl.load(older).action_space == env.action_space
    (older / run_folder.SPACES).unlink()
    (older / run_folder.SPACES).write_text('{"observation_space": {"type": "Box"}}')
    with pytest.raises(run_folder.RunFolderError) as error:
        batchrl.load(older)
    assert str(error.value) == (
        f"cannot read {str(older / run_folder.SPACES)!r}: spaces' data holds observation_space "
        "and action_space, got {'observation_space': {'type': 'Box'}}"
    )


@pytest.mark.parametrize("make", [cue.FrameCue, parameter_cue.ParameterCue])
def test_worker_envs_spaces_are_kept_as_gymnasium_gave_them(tmp_path, make):
    # A Dict of a uint8 frame and a vector; a Dict action of a Box and a Discrete.
    settings = dict(steps=64, num_envs=4, max_length=4, phase_steps=64, eval_episodes=4)
    settings |= dict(policy_layers=(8,), objective="clipped", steps_per_update=8)
    env = f"{make.__module__}:{make.__name__}"
    run = batchrl.train("cartpole", env=env, logdir=tmp_path, num_minibatches=2, **settings)
    policy = batchrl.load(run.rundir)
    assert policy.observation_space == make().observation_space
    assert policy.action_space == make().action_space


def test_a_flag_read_as_a_string_or_a_number_is_refused_not_taken_as_true(run):
    # "False" from a command line or a file was true: the best checkpoint loaded.
    with pytest.raises(ValueError, match=r"^best is True or False, got 'False'$"):
        batchrl.load(run.rundir, best="False")
    policy = batchrl.load(run.rundir, best=np.False_)
    with pytest.raises(ValueError, match=r"^reset's mask holds 2: True/False or 1/0 only$"):
        policy.reset([2, 0, 0])  # Before the first act too: it was taken unread.
    policy.act(np.zeros((3, 3), np.float32))
    policy.reset([0, 1, 0])  # 1/0 as True/False, as a vector env's done flags come.
    with pytest.raises(ValueError, match=r"^reset's mask holds 2: True/False or 1/0 only$"):
        policy.reset(np.array([0, 2, 0]))


def test_predict_carries_the_state_it_is_given_as_sb3s_recurrent_policies_do(caplog):
    # predict read no state: two loops of envs on one policy acted on each other's carry,
    # and an episode_start of the wrong size was skipped without a word.
    policy = batchrl.train("pendulum_jax", steps=400, recurrent=True, **TINY).policy
    first = np.array([[0.6, -0.8, 1.5], [1.0, 0.0, -8.0]], np.float32)
    later = np.array([[-0.2, 0.98, 0.3], [0.0, 1.0, 2.0]], np.float32)
    fresh, state = policy.predict(first, deterministic=True)
    assert state.shape == (2, 16)  # The last of TINY's policy layers: its GRU.
    alone, _ = policy.predict(later, state, deterministic=True)
    # Another loop between the two calls, on its own state: the first loop's action holds.
    policy.predict(later[::-1], deterministic=True)
    np.testing.assert_array_equal(policy.predict(later, state, deterministic=True)[0], alone)
    assert not np.allclose(alone, policy.predict(later, deterministic=True)[0], atol=1e-4)
    # The carry after `later`; episode_start starts env 1's episode first.
    _, carried = policy.predict(later, state, deterministic=True)
    started, _ = policy.predict(first, carried, [False, True], deterministic=True)
    np.testing.assert_array_equal(started[1], fresh[1])
    assert not np.allclose(started[0], fresh[0], atol=1e-4)
    one, one_state = policy.predict(first[0], deterministic=True)  # One env: [H].
    assert one_state.shape == (16,) and np.allclose(one, fresh[0])
    with pytest.raises(ValueError, match=r"^episode_start has shape \(3,\): the policy acts on 2"):
        policy.predict(first, state, [True, True, True])
    with pytest.raises(ValueError, match=r"^state has shape \(2, 7\): this policy's is \(2, 16\)"):
        policy.predict(first, np.zeros((2, 7)))
    # A NaN, infinite or overflowing carry drew NaN actions and carries, unsaid; 2, NaN or
    # "no" in episode_start started an episode, as reset's mask refuses them.
    for bad, said in [(np.nan, "nan"), (np.inf, "inf"), (1e39, "1e+39")]:
        with pytest.raises(ValueError, match=rf"^state holds {re.escape(said)}: a carry holds "):
            policy.predict(first, np.full((2, 16), bad))
    with pytest.raises(ValueError, match=r"^state is a dict: a carry is an array of floats"):
        policy.predict(first, {"h": state})
    for bad in ([2, 0], [np.nan, 0], ["no", "no"]):
        with pytest.raises(ValueError, match=r"^episode_start holds .*: True/False or 1/0 only$"):
            policy.predict(first, state, bad)
    assert "a recurrent policy acted on" not in caplog.text  # predict's carry is `state`.
    # act keeps the carry inside, and a pickled copy carries it on.
    policy.act(first)
    copy = pickle.loads(pickle.dumps(policy))
    np.testing.assert_array_equal(copy.act(later), policy.act(later))
    # A predict between act's steps, of as many envs (SB3's evaluate_policy, say), leaves
    # act's carry as it was: act went on from the state predict was given.
    policy.predict(first[::-1], np.ones((2, 16), np.float32))
    np.testing.assert_array_equal(policy.act(first), copy.act(first))
    # Another number of envs starts every env afresh, said.
    policy.act(first[:1])
    assert "a recurrent policy acted on 2 env(s) and now on 1" in caplog.text


def test_a_multi_binary_leaf_takes_zeros_and_ones_in_any_dtype_and_nothing_else():
    # Gymnasium's MultiBinary holds 1.0 and 0.0 and not 2 or -1, which were read as numbers.
    space = gym.spaces.Dict({"bits": gym.spaces.MultiBinary(2), "x": gym.spaces.Box(-1, 1, (2,))})
    policy = _untrained(space, gym.spaces.Discrete(3))
    obs = {"bits": np.array([1, 0], np.int8), "x": np.array([0.5, -0.5], np.float32)}
    assert policy.act(obs) == policy.act({**obs, "bits": np.array([1.0, 0.0])})
    for bits, said in (([2, 0], "2"), ([[0, 1], [-1, 0]], "-1"), ([0.5, 1.0], "0.5")):
        with pytest.raises(ValueError) as error:
            policy.act({**obs, "bits": np.array(bits, np.asarray(bits).dtype)})
        assert str(error.value) == f'obs["bits"] holds {said}: this leaf takes 0 or 1'


def test_a_list_of_tuple_observations_and_a_scalar_leaf_are_said_as_a_batch_is_given():
    # Blackjack's Tuple: a list of two observations was said to be a tuple of the wrong length.
    space = gym.spaces.Tuple((gym.spaces.Discrete(32), gym.spaces.Discrete(11)))
    policy = _untrained(space, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"^obs is a list of 3 items of tuples: one observation"):
        policy.act([(3, 4), (5, 6), (7, 8)])
    with pytest.raises(ValueError) as error:
        policy.act((np.zeros((2, 1), int), np.zeros((2, 1), int)))
    assert str(error.value) == (
        "obs[0] has shape (2, 1): expected () for one env, or [N] for a batch, as every leaf"
    )
    assert policy.act((np.array([3, 5]), np.array([4, 6]))).shape == (2,)


def _untrained(observation: gym.Space, action: gym.Space) -> policy_lib.Policy:
    """A clipped-objective policy of zero parameters for these spaces: what `act` reads."""
    spec = spaces.env_spec(observation, action)
    config = train_config.replace(presets.get("cartpole_jax"), objective="clipped")
    algorithm = algorithm_lib.of(config.algorithm)
    networks = algorithm.networks(config.algorithm, spec)
    shapes = algorithm_lib.init_shapes(algorithm, networks, config.shape)
    return policy_lib.Policy(algorithm, networks, algorithm_lib.zeros(shapes.learner))

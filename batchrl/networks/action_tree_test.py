"""A policy over an action tree: a head a leaf, summed, and the env's tree back."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec as env_spec_lib
from batchrl.envs import spaces
from batchrl.networks import action_tree, distributions

# Every leaf kind, nested: a Box, a Discrete with a start, a MultiDiscrete, a MultiBinary.
SPACE = gym.spaces.Dict(
    {
        "move": gym.spaces.Tuple(
            (gym.spaces.Box(-2.0, 4.0, (2,)), gym.spaces.Discrete(3, start=-1))
        ),
        "pick": gym.spaces.MultiDiscrete([2, 4]),
        "lights": gym.spaces.MultiBinary(3),
    }
)
TREE = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (2,)), SPACE).action


def random_dist(key: jax.Array, rows: int) -> dict:
    means, logits = action_tree.sizes(TREE)
    mean_key, std_key, logit_key = jax.random.split(key, 3)
    return {
        "mean": jax.random.normal(mean_key, (rows, means)),
        "std": jax.random.uniform(std_key, (rows, means), minval=0.2, maxval=1.0),
        "logits": jax.random.normal(logit_key, (rows, logits)),
    }


def test_the_spec_of_a_tree_is_one_float_row_of_its_leaves():
    spec = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (2,)), SPACE)
    # Leaves in sorted-key order: lights (3 bits), move's Box (2) and Discrete (1), pick (2).
    assert spec.action_shape == (8,) and not spec.discrete
    assert action_tree.sizes(TREE) == (2, 3 + 3 + 6)  # Box means; bits, 3 values, 2 + 4.
    assert env_spec_lib.from_data(env_spec_lib.to_data(spec)) == spec


def test_log_prob_entropy_and_kl_are_the_sums_of_the_leaves():
    dist = random_dist(jax.random.key(0), 5)
    row = action_tree.sample(TREE, dist, jax.random.key(1))
    other = random_dist(jax.random.key(2), 5)
    lights = dist["logits"][:, :3]
    choice = dist["logits"][:, 3:6]
    pick = dist["logits"][:, 6:]
    expected_log_prob = (
        distributions.bernoulli_log_prob(lights, row[:, :3])
        + distributions.gaussian_log_prob(dist["mean"], dist["std"], row[:, 3:5])
        + distributions.categorical_log_prob(choice, row[:, 5].astype(jnp.int32))
        + distributions.multi_categorical_log_prob(pick, row[:, 6:].astype(jnp.int32), (2, 4))
    )
    np.testing.assert_allclose(action_tree.log_prob(TREE, dist, row), expected_log_prob, 1e-6)
    expected_entropy = (
        distributions.bernoulli_entropy(lights)
        + distributions.gaussian_entropy(dist["mean"], dist["std"])
        + distributions.categorical_entropy(choice)
        + distributions.multi_categorical_entropy(pick, (2, 4))
    )
    np.testing.assert_allclose(action_tree.entropy(TREE, dist), expected_entropy, 1e-6)
    assert np.all(np.asarray(action_tree.kl(TREE, dist, other)) > 0)
    np.testing.assert_allclose(action_tree.kl(TREE, dist, dist), 0.0, atol=1e-6)


def test_bernoulli_matches_its_closed_forms():
    logits = jnp.array([[-1.5, 0.0, 2.0]])
    p = jax.nn.sigmoid(logits)
    bits = jnp.array([[1, 0, 1]])
    expected = jnp.log(p[0, 0]) + jnp.log(1 - p[0, 1]) + jnp.log(p[0, 2])
    np.testing.assert_allclose(distributions.bernoulli_log_prob(logits, bits), [expected], 1e-6)
    entropy = -(p * jnp.log(p) + (1 - p) * jnp.log(1 - p)).sum()
    np.testing.assert_allclose(distributions.bernoulli_entropy(logits), [entropy], 1e-6)
    q = jax.nn.sigmoid(-logits)
    kl = (p * jnp.log(p / q) + (1 - p) * jnp.log((1 - p) / (1 - q))).sum()
    np.testing.assert_allclose(distributions.bernoulli_kl(logits, -logits), [kl], 1e-5)
    draws = distributions.bernoulli_sample(jax.random.key(0), jnp.broadcast_to(logits, (4000, 3)))
    np.testing.assert_allclose(draws.mean(axis=0), p[0], atol=0.03)
    assert distributions.bernoulli_mode(logits).tolist() == [[0, 0, 1]]


def test_to_env_gives_each_leaf_in_its_space():
    dist = random_dist(jax.random.key(3), 64)
    row = action_tree.sample(TREE, dist, jax.random.key(4))
    action = jax.tree.map(np.asarray, action_tree.to_env(TREE, row))
    for i in range(64):
        one = jax.tree.map(lambda leaf, i=i: leaf[i], action)
        one["pick"] = one["pick"].astype(SPACE["pick"].dtype)
        assert SPACE.contains(one), one
    # A Box's [-1, 1] maps onto its bounds; a Discrete is shifted by its start.
    box, choice = action["move"]
    np.testing.assert_allclose(box, np.clip(-2.0 + (row[:, 3:5] + 1.0) * 3.0, -2.0, 4.0), 1e-5)
    np.testing.assert_array_equal(choice, np.asarray(row[:, 5]).astype(np.int32) - 1)
    assert action["lights"].dtype == np.int8 and box.dtype == np.float32


def test_the_mode_is_each_leafs_most_probable_value():
    dist = random_dist(jax.random.key(5), 3)
    row = action_tree.mode(TREE, dist)
    np.testing.assert_array_equal(row[:, :3], dist["logits"][:, :3] > 0)
    np.testing.assert_array_equal(row[:, 3:5], dist["mean"])
    np.testing.assert_array_equal(row[:, 5], jnp.argmax(dist["logits"][:, 3:6], axis=-1))


def test_an_integer_leaf_past_what_a_float32_row_holds_is_refused():
    huge = gym.spaces.Dict({"id": gym.spaces.Discrete(2**25)})
    reach = r"^action\[\"id\"\] of env: an integer action leaf's values reach past 16777216"
    with pytest.raises(spaces.UnsupportedSpaceError, match=reach):
        spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (1,)), huge)


def test_a_multi_binary_action_alone_is_a_tree_of_one_leaf():
    spec = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (2,)), gym.spaces.MultiBinary((2, 3)))
    assert spec.action_shape == (6,) and action_tree.sizes(spec.action) == (0, 6)
    logits = jnp.array([[3.0, -3.0, 3.0, -3.0, 3.0, -3.0]])
    dist = {"mean": jnp.zeros((1, 0)), "std": jnp.ones((1, 0)), "logits": logits}
    action = action_tree.to_env(spec.action, action_tree.mode(spec.action, dist))
    assert action.dtype == jnp.int8
    np.testing.assert_array_equal(action, [[[1, 0, 1], [0, 1, 0]]])

"""A policy's actions land inside every Box: half-bounded, float64, integer; trained and loaded."""

import functools
import warnings

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest

import batchrl
from batchrl.networks import box_actions
from batchrl.testing import mock

X = jnp.linspace(-3.0, 3.0, 601)[:, None]  # The policy's draws, well past [-1, 1].


def test_an_element_bounded_on_one_side_is_clipped_to_it_and_passes_inside():
    mapped = np.asarray(box_actions.onto_box(jnp.tile(X, (1, 2)), (0.0, -np.inf), (1.0, np.inf)))
    assert mapped[:, 0].min() == 0.0 and mapped[:, 0].max() == 1.0  # Both finite: mapped.
    np.testing.assert_array_equal(mapped[:, 1], np.asarray(X[:, 0]))  # None: as drawn.
    half = np.asarray(box_actions.onto_box(X, (0.0,), (np.inf,)))[:, 0]
    np.testing.assert_array_equal(half, np.maximum(np.asarray(X[:, 0]), 0.0))


def test_a_float64_bound_float32_cannot_hold_is_not_crossed():
    mapped = np.asarray(box_actions.onto_box(X, (-0.1,), (0.1,)), np.float64)
    assert mapped.min() >= -0.1 and mapped.max() <= 0.1
    assert mapped.max() > 0.1 - 1e-8  # The bound itself, as near as float32 gets inside.


def test_bounds_further_apart_than_float32_holds_pass_the_draw_as_unbounded_ones_do():
    # float32's largest value each way, a common "unbounded": the span overflowed, and
    # every action came out at a bound (a draw of exactly -1 as NaN).
    # And 1e300, past float32's range, without numpy's overflow warning to the user.
    largest = float(np.finfo(np.float32).max)
    for low, high in ((-largest, largest), (0.0, 1e300)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mapped = np.asarray(box_actions.onto_box(X, (low,), (high,)))[:, 0]
        np.testing.assert_array_equal(mapped, np.clip(np.asarray(X[:, 0]), low, None))


def test_each_integer_of_a_box_gets_an_equal_share_of_the_policys_range():
    inside = jnp.linspace(-1.0, 1.0, 100_001)[:, None]
    values = np.asarray(box_actions.onto_box(inside, (0.0,), (4.0,), integers=True))[:, 0]
    counts = np.bincount(values.astype(int))
    assert len(counts) == 5 and counts.min() > 0.99 * counts.max()


SPACES = {
    "half_bounded": gym.spaces.Box(np.array([0, -np.inf], np.float32), np.float32(np.inf)),
    "float64": gym.spaces.Box(-0.1, 0.1, (1,), np.float64),
    "integers": gym.spaces.Box(0, 4, (2,), np.int64),
}


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_training_and_its_loaded_policy_act_inside_the_space(space):
    run = batchrl.train(
        "pendulum",
        # Refuses any action outside the space; from batchrl.testing, which workers import
        # without this module's JAX.
        env=functools.partial(mock.ActionEcho, space, duration=10),
        steps=200,
        num_envs=2,
        max_length=10,
        update_every=2,
        final_episodes=2,
        logdir=None,
    )
    assert np.isfinite(run.metrics[-1]["final/return"])  # Every action was in the space.
    size = gym.spaces.flatdim(space)  # The env observes the action it was given.
    obs = np.random.default_rng(0).uniform(-1.0, 1.0, (64, size))
    for deterministic in (True, False):
        actions = run.policy.act(obs, deterministic=deterministic)
        assert actions.dtype.kind == space.dtype.kind  # Integers for an integer Box.
        assert all(space.contains(action) for action in actions)

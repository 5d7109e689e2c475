import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.networks import recurrent

B, T, OBS_SIZE, A = 4, 6, 3, 2
POLICY = recurrent.RecurrentGaussianPolicy(action_size=A, layers=(16, 8))


@pytest.fixture(scope="module")
def params():
    carry = POLICY.initial_carry(B)
    obs = jnp.zeros((B, OBS_SIZE))
    return jax.jit(POLICY.init)(jax.random.key(0), carry, obs, jnp.zeros(B, bool))


@pytest.fixture(scope="module")
def step():
    return jax.jit(POLICY.apply)


def _obs(key, shape=(B, OBS_SIZE)):
    return jax.random.normal(jax.random.key(key), shape)


def _used_carry(params, step):
    """A carry after three steps, so it is far from zeros."""
    carry = POLICY.initial_carry(B)
    for key in range(3):
        carry, _ = step(params, carry, _obs(key), jnp.zeros(B, bool))
    return carry


def test_shapes(params, step):
    carry = POLICY.initial_carry(B)
    assert carry.shape == (B, 8)
    assert carry.dtype == jnp.float32
    np.testing.assert_array_equal(carry, 0.0)
    carry, (mean, std) = step(params, carry, _obs(0), jnp.zeros(B, bool))
    assert carry.shape == (B, 8)
    assert mean.shape == std.shape == (B, A)
    np.testing.assert_allclose(std, 0.35, rtol=1e-6)


def test_initial_carry_needs_a_layer():
    with pytest.raises(ValueError, match="at least one layer"):
        recurrent.RecurrentGaussianPolicy(action_size=A, layers=()).initial_carry(B)


def test_mismatched_batch_is_rejected(params, step):
    with pytest.raises(ValueError, match="reset"):
        step(params, POLICY.initial_carry(B), _obs(0), jnp.zeros(B + 1, bool))


def test_reset_gives_the_output_of_a_fresh_carry(params, step):
    used = _used_carry(params, step)
    obs = _obs(10)
    reset = jnp.array([True, False, True, False])
    carry, (mean, _) = step(params, used, obs, reset)
    fresh_carry, (fresh_mean, _) = step(params, POLICY.initial_carry(B), obs, jnp.zeros(B, bool))
    kept_carry, (kept_mean, _) = step(params, used, obs, jnp.zeros(B, bool))
    expected_carry = jnp.where(reset[:, None], fresh_carry, kept_carry)
    expected_mean = jnp.where(reset[:, None], fresh_mean, kept_mean)
    np.testing.assert_allclose(carry, expected_carry, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-6, atol=1e-7)
    # The carry matters, so the comparison above is not vacuous.
    assert not np.allclose(fresh_mean, kept_mean, rtol=1e-3, atol=1e-5)
    assert not np.allclose(fresh_carry, kept_carry, rtol=1e-3, atol=1e-5)


def test_unroll_equals_a_python_loop(params, step):
    obs = _obs(20, (T, B, OBS_SIZE))
    reset = jax.random.bernoulli(jax.random.key(21), 0.3, (T, B)).at[0].set(True)
    start = _used_carry(params, step)
    unroll = jax.jit(recurrent.unroll, static_argnums=0)
    carry, (mean, std) = unroll(POLICY, params, start, obs, reset)
    assert mean.shape == std.shape == (T, B, A)
    loop_carry, loop_means = start, []
    for t in range(T):
        loop_carry, (loop_mean, _) = step(params, loop_carry, obs[t], reset[t])
        loop_means.append(loop_mean)
    np.testing.assert_allclose(carry, loop_carry, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, jnp.stack(loop_means), rtol=1e-5, atol=1e-6)

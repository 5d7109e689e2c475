import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.parts import normalizer

SHAPE = (2, 3)


def stream(seed, offset=100.0, scale=3.0):
    """Rows fed in uneven batches, with the rows each batch contributes."""
    rng = np.random.default_rng(seed)
    sizes = (1, 7, 0, 3, 10, 50, 4)
    batches = []
    for index, size in enumerate(sizes):
        rows = (offset + scale * rng.standard_normal((size, *SHAPE))).astype(np.float32)
        if index == 4:  # a masked batch
            mask = rng.random(size) < 0.5
            mask[0], mask[1] = True, False
        elif index == 6:  # a fully masked batch
            mask = np.zeros(size, bool)
        else:
            mask = None
        batches.append((rows, mask))
    return batches


def feed(state, batches, update=normalizer.update):
    for rows, mask in batches:
        state = update(state, jnp.asarray(rows), None if mask is None else jnp.asarray(mask))
    return state


def kept_rows(batches):
    return np.concatenate([rows if mask is None else rows[mask] for rows, mask in batches])


@pytest.mark.parametrize("offset", [0.0, 100.0, 1e4])
def test_matches_numpy_over_uneven_masked_batches(offset):
    batches = stream(seed=0, offset=offset)
    state = feed(normalizer.init(SHAPE), batches)
    expected = kept_rows(batches).astype(np.float64)
    assert state.count.dtype == jnp.float32 and state.count.shape == ()
    assert state.mean.shape == SHAPE and state.var_sum.shape == SHAPE
    assert float(state.count) == len(expected)
    np.testing.assert_allclose(state.mean, expected.mean(0), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(normalizer.std(state), expected.std(0, ddof=1), rtol=1e-4)


def test_empty_batches_leave_state_unchanged():
    state = feed(normalizer.init(SHAPE), stream(seed=1)[:2])
    rows = jnp.ones((5, *SHAPE))
    for same in (
        normalizer.update(state, jnp.zeros((0, *SHAPE))),
        normalizer.update(state, rows, jnp.zeros(5, bool)),
        jax.jit(normalizer.update)(state, rows, jnp.zeros(5, bool)),
    ):
        for new, old in zip(jax.tree.leaves(same), jax.tree.leaves(state), strict=True):
            np.testing.assert_array_equal(new, old)
    empty = normalizer.update(normalizer.init(SHAPE), rows, jnp.zeros(5, bool))
    assert float(empty.count) == 0.0 and bool(normalizer.check_finite(empty))


def test_std_is_one_before_two_samples():
    state = normalizer.init(())
    np.testing.assert_array_equal(normalizer.std(state), 1.0)
    state = normalizer.update(state, jnp.array([7.0]))
    np.testing.assert_array_equal(normalizer.std(state), 1.0)
    np.testing.assert_array_equal(state.mean, 7.0)
    state = normalizer.update(state, jnp.array([9.0]))
    np.testing.assert_allclose(normalizer.std(state), np.sqrt(2.0), rtol=1e-6)


def test_std_has_a_floor():
    state = normalizer.update(normalizer.init((2,)), jnp.full((4, 2), 3.0))
    np.testing.assert_allclose(normalizer.std(state), np.sqrt(normalizer.VAR_FLOOR), rtol=1e-6)
    assert np.all(np.isfinite(normalizer.normalize(state, jnp.ones((2,)), center=True, clip=5.0)))


def test_normalize_centres_scales_and_clips():
    # Column 0: mean 1, std 2; column 1: mean 10, std 1.
    rows = jnp.array([[-1.0, 9.0], [3.0, 11.0], [1.0, 10.0]])
    state = normalizer.update(normalizer.init((2,)), rows)
    np.testing.assert_allclose(normalizer.std(state), [2.0, 1.0], rtol=1e-6)
    x = jnp.array([[5.0, 10.5], [100.0, -100.0]])  # [B, 2]
    np.testing.assert_allclose(
        normalizer.normalize(state, x, center=True, clip=None), [[2.0, 0.5], [49.5, -110.0]]
    )
    np.testing.assert_allclose(
        normalizer.normalize(state, x, center=True, clip=5.0), [[2.0, 0.5], [5.0, -5.0]]
    )
    np.testing.assert_allclose(
        normalizer.normalize(state, x, center=False, clip=10.0), [[2.5, 10.0], [10.0, -10.0]]
    )


def test_update_is_jittable():
    batches = stream(seed=2)
    eager = feed(normalizer.init(SHAPE), batches)
    jitted = feed(normalizer.init(SHAPE), batches, update=jax.jit(normalizer.update))
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    normalize = jax.jit(normalizer.normalize, static_argnames=("center", "clip"))
    out = normalize(jitted, jnp.zeros((4, *SHAPE)), center=True, clip=5.0)
    assert out.shape == (4, *SHAPE) and out.dtype == jnp.float32


def test_check_finite():
    state = normalizer.update(normalizer.init((2,)), jnp.ones((3, 2)))
    assert bool(normalizer.check_finite(state))
    assert bool(jax.jit(normalizer.check_finite)(state))
    bad = normalizer.update(state, jnp.array([[1.0, np.nan]]))
    assert not bool(normalizer.check_finite(bad))
    bad = normalizer.update(state, jnp.array([[np.inf, 1.0]]))
    assert not bool(jax.jit(normalizer.check_finite)(bad))


def test_non_finite_tells_a_nan_from_numbers_too_large_for_float32():
    # Observations of 1e30 are finite, but their squares overflow float32: the error
    # said the env's observations were non-finite, and named no element.
    state = normalizer.update(normalizer.init((3,)), jnp.ones((4, 3)))
    assert normalizer.non_finite(state, "obs") is None
    huge = normalizer.update(state, jnp.array([[1.0, 1e30, 1.0]]))
    assert not bool(normalizer.check_finite(huge))
    assert normalizer.non_finite(huge, "obs") == (
        "obs[1] reached the normaliser too large for float32 statistics: scale them"
    )
    nan = normalizer.update(state, jnp.array([[np.nan, 1.0, np.inf]]))
    assert normalizer.non_finite(nan, 'obs["position"]') == (
        'obs["position"][0], obs["position"][2] reached the normaliser non-finite (NaN or '
        "inf, or beyond float32's 3.4e38): check them"
    )
    many = normalizer.update(normalizer.init((2, 3)), jnp.full((1, 2, 3), np.nan))
    assert normalizer.non_finite(many, "obs") == (
        "obs[0][0], obs[0][1], obs[0][2] (6 elements) reached the normaliser non-finite "
        "(NaN or inf, or beyond float32's 3.4e38): check them"
    )


def test_rejects_wrong_shapes():
    state = normalizer.init(SHAPE)
    with pytest.raises(ValueError, match="batch"):
        normalizer.update(state, jnp.zeros(SHAPE))
    with pytest.raises(ValueError, match="mask"):
        normalizer.update(state, jnp.zeros((4, *SHAPE)), jnp.ones(3, bool))
    with pytest.raises(ValueError, match="x must"):
        normalizer.normalize(state, jnp.zeros((4, 3)), center=True, clip=None)

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from batchrl.networks import distributions

MEAN_P = np.array([0.3, -1.0, 0.5], np.float32)
STD_P = np.array([0.8, 1.5, 0.4], np.float32)
MEAN_Q = np.array([0.0, -0.5, 1.0], np.float32)
STD_Q = np.array([1.0, 1.2, 0.7], np.float32)


def _multivariate_kl(mean_p, std_p, mean_q, std_q):
    """KL between Gaussians via the full-covariance formula, in float64."""
    cov_p = np.diag(np.square(std_p.astype(np.float64)))
    cov_q = np.diag(np.square(std_q.astype(np.float64)))
    cov_q_inv = np.linalg.inv(cov_q)
    diff = mean_q.astype(np.float64) - mean_p.astype(np.float64)
    _, logdet_p = np.linalg.slogdet(cov_p)
    _, logdet_q = np.linalg.slogdet(cov_q)
    trace = np.trace(cov_q_inv @ cov_p)
    return 0.5 * (trace + diff @ cov_q_inv @ diff - len(diff) + logdet_q - logdet_p)


def test_gaussian_kl_matches_closed_form():
    kl = distributions.gaussian_kl(MEAN_P, STD_P, MEAN_Q, STD_Q)
    assert kl.shape == ()
    np.testing.assert_allclose(kl, _multivariate_kl(MEAN_P, STD_P, MEAN_Q, STD_Q), rtol=1e-5)


def test_gaussian_kl_matches_monte_carlo():
    x = distributions.gaussian_sample(jax.random.key(0), jnp.tile(MEAN_P, (200_000, 1)), STD_P)
    x = np.asarray(x, np.float64)
    log_p = stats.norm.logpdf(x, MEAN_P, STD_P).sum(-1)
    log_q = stats.norm.logpdf(x, MEAN_Q, STD_Q).sum(-1)
    log_ratio = log_p - log_q
    estimate = log_ratio.mean()
    standard_error = log_ratio.std() / np.sqrt(len(log_ratio))
    kl = float(distributions.gaussian_kl(MEAN_P, STD_P, MEAN_Q, STD_Q))
    assert abs(estimate - kl) < 4 * standard_error + 1e-3, (estimate, kl, standard_error)


def test_gaussian_kl_of_identical_is_zero_and_batches():
    mean = jnp.stack([MEAN_P, MEAN_Q])
    std = jnp.stack([STD_P, STD_Q])
    np.testing.assert_allclose(distributions.gaussian_kl(mean, std, mean, std), [0.0, 0.0])
    kl = distributions.gaussian_kl(mean, std, mean[::-1], std[::-1])
    assert kl.shape == (2,)
    np.testing.assert_allclose(kl[0], _multivariate_kl(MEAN_P, STD_P, MEAN_Q, STD_Q), rtol=1e-5)
    np.testing.assert_allclose(kl[1], _multivariate_kl(MEAN_Q, STD_Q, MEAN_P, STD_P), rtol=1e-5)


def test_gaussian_log_prob_matches_scipy():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(4, 3)).astype(np.float32)
    std = rng.uniform(0.2, 2.0, size=(4, 3)).astype(np.float32)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    log_prob = distributions.gaussian_log_prob(mean, std, x)
    assert log_prob.shape == (4,)
    np.testing.assert_allclose(log_prob, stats.norm.logpdf(x, mean, std).sum(-1), rtol=1e-5)
    reference = [
        stats.multivariate_normal(mean[i], np.diag(np.square(std[i]))).logpdf(x[i])
        for i in range(4)
    ]
    np.testing.assert_allclose(log_prob, reference, rtol=1e-5)


def test_gaussian_entropy_matches_scipy_and_broadcasts_std():
    mean = np.zeros((5, 3), np.float32)
    entropy = distributions.gaussian_entropy(mean, STD_P)
    assert entropy.shape == (5,)
    reference = stats.multivariate_normal(np.zeros(3), np.diag(np.square(STD_P))).entropy()
    np.testing.assert_allclose(entropy, np.full(5, reference), rtol=1e-5)


def test_gaussian_sample_moments():
    x = distributions.gaussian_sample(jax.random.key(1), jnp.tile(MEAN_P, (100_000, 1)), STD_P)
    assert x.shape == (100_000, 3)
    assert x.dtype == jnp.float32
    np.testing.assert_allclose(x.mean(0), MEAN_P, atol=0.02)
    np.testing.assert_allclose(x.std(0), STD_P, rtol=0.02)


LOGITS = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [-3.0, 0.2, 0.1, 4.0]], np.float32)


def test_categorical_log_prob_matches_log_softmax():
    actions = np.array([2, 0, 1])
    log_prob = distributions.categorical_log_prob(LOGITS, actions)
    assert log_prob.shape == (3,)
    reference = special.log_softmax(LOGITS.astype(np.float64), axis=-1)[np.arange(3), actions]
    np.testing.assert_allclose(log_prob, reference, rtol=1e-6)


def test_categorical_entropy_matches_scipy():
    entropy = distributions.categorical_entropy(LOGITS)
    reference = stats.entropy(special.softmax(LOGITS.astype(np.float64), axis=-1), axis=-1)
    np.testing.assert_allclose(entropy, reference, rtol=1e-5)
    np.testing.assert_allclose(entropy[1], np.log(4), rtol=1e-6)


def test_categorical_kl_matches_direct_sum():
    other = LOGITS[::-1] + np.array([0.3, -0.2, 0.0, 1.0], np.float32)
    kl = distributions.categorical_kl(LOGITS, other)
    p = special.softmax(LOGITS.astype(np.float64), axis=-1)
    q = special.softmax(other.astype(np.float64), axis=-1)
    reference = [sum(p[i, j] * np.log(p[i, j] / q[i, j]) for j in range(4)) for i in range(3)]
    np.testing.assert_allclose(kl, reference, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(distributions.categorical_kl(LOGITS, LOGITS), np.zeros(3), atol=1e-6)


def test_categorical_masked_action_is_finite_with_finite_gradients():
    logits = jnp.array([0.0, -jnp.inf, 1.0])
    entropy, entropy_grad = jax.value_and_grad(distributions.categorical_entropy)(logits)
    kl, kl_grad = jax.value_and_grad(distributions.categorical_kl)(logits, jnp.zeros(3))
    p = special.softmax([0.0, 1.0])
    np.testing.assert_allclose(entropy, stats.entropy(p), rtol=1e-6)
    np.testing.assert_allclose(kl, np.sum(p * np.log(p * 3)), rtol=1e-5)
    assert np.all(np.isfinite(entropy_grad)) and np.all(np.isfinite(kl_grad))


def test_categorical_sample_frequencies():
    logits = jnp.array([1.0, 0.0, -1.0, 0.5])
    samples = distributions.categorical_sample(jax.random.key(2), jnp.tile(logits, (200_000, 1)))
    assert samples.shape == (200_000,)
    assert samples.dtype == jnp.int32
    frequencies = np.bincount(np.asarray(samples), minlength=4) / len(samples)
    np.testing.assert_allclose(frequencies, special.softmax(np.asarray(logits)), atol=0.005)


@pytest.mark.parametrize("logits", [LOGITS, LOGITS[0]])
def test_categorical_mode(logits):
    mode = distributions.categorical_mode(logits)
    assert mode.dtype == jnp.int32
    np.testing.assert_array_equal(mode, np.argmax(logits, axis=-1))


NVEC = (2, 3, 1, 4)


def _elements(logits, nvec=NVEC):
    """Each element's logits, sliced from [..., sum(nvec)]."""
    bounds = np.cumsum((0, *nvec))
    return [logits[..., a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("nvec", [NVEC, (3, 3)])
def test_multi_categorical_is_the_sum_of_its_elements(nvec):
    keys = jax.random.split(jax.random.key(0), 3)
    logits_p, logits_q = (jax.random.normal(k, (5, sum(nvec))) for k in keys[:2])
    x = np.stack([np.arange(5) % n for n in nvec], axis=-1)  # [5, K]
    parts_p, parts_q = _elements(logits_p, nvec), _elements(logits_q, nvec)
    log_prob = sum(distributions.categorical_log_prob(p, x[:, k]) for k, p in enumerate(parts_p))
    entropy = sum(distributions.categorical_entropy(p) for p in parts_p)
    kl = sum(distributions.categorical_kl(p, q) for p, q in zip(parts_p, parts_q, strict=True))
    got = distributions.multi_categorical_log_prob(logits_p, x, nvec)
    np.testing.assert_allclose(got, log_prob, rtol=1e-5, atol=1e-6)
    got = distributions.multi_categorical_entropy(logits_p, nvec)
    np.testing.assert_allclose(got, entropy, rtol=1e-5, atol=1e-6)
    got = distributions.multi_categorical_kl(logits_p, logits_q, nvec)
    np.testing.assert_allclose(got, kl, rtol=1e-5, atol=1e-6)
    modes = np.stack([np.argmax(p, axis=-1) for p in parts_p], axis=-1)
    np.testing.assert_array_equal(distributions.multi_categorical_mode(logits_p, nvec), modes)


def test_multi_categorical_samples_each_element_in_its_range_with_its_frequencies():
    logits = jnp.log(jnp.array([0.2, 0.8, 0.5, 0.3, 0.2, 1.0, 0.1, 0.1, 0.1, 0.7]))
    x = distributions.multi_categorical_sample(
        jax.random.key(1), jnp.tile(logits, (40_000, 1)), NVEC
    )
    assert x.shape == (40_000, 4) and x.dtype == jnp.int32
    for k, (n, probs) in enumerate(zip(NVEC, _elements(np.exp(np.asarray(logits))), strict=True)):
        counts = np.bincount(np.asarray(x[:, k]), minlength=n)
        assert len(counts) == n  # Nothing drawn past the element's count.
        np.testing.assert_allclose(counts / len(x), probs, atol=0.01)


def test_multi_categorical_gradients_are_finite_with_unequal_counts():
    logits = jax.random.normal(jax.random.key(2), (3, sum(NVEC)))
    x = jnp.array([[1, 2, 0, 3]] * 3)

    def loss(logits):
        return (
            distributions.multi_categorical_log_prob(logits, x, NVEC).sum()
            + distributions.multi_categorical_entropy(logits, NVEC).sum()
            + distributions.multi_categorical_kl(logits, logits * 0.5, NVEC).sum()
        )

    gradient = jax.grad(loss)(logits)
    assert bool(jnp.isfinite(gradient).all()) and bool((gradient != 0).any())

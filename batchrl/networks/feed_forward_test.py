import flax.linen as nn
import jax
import numpy as np
import pytest

from batchrl.networks import feed_forward

OBS_SHAPE = (3, 2)
B = 256


def _obs(obs_shape=OBS_SHAPE):
    return jax.random.normal(jax.random.key(1), (B, *obs_shape))


def _init_apply(module, obs):
    """Initialises `module` on `obs` and applies it, both compiled: (params, outputs)."""
    params = jax.jit(module.init)(jax.random.key(0), obs)
    return params, jax.jit(module.apply)(params, obs)


@pytest.fixture(scope="module")
def gaussian():
    """The default policy on [B, 3, 2] normal observations: (params, (mean, std))."""
    return _init_apply(feed_forward.GaussianPolicy(action_size=2), _obs())


def _kernels(params):
    """Every kernel in `params`, keyed by its path."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path): leaf for path, leaf in flat if "kernel" in str(path)}


def _biases(params):
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return [leaf for path, leaf in flat if "bias" in str(path)]


def test_shapes_flatten_observation_dimensions(gaussian, orthogonal_params):
    params, (mean, std) = gaussian
    assert mean.shape == std.shape == (B, 2)
    assert params["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (6, 200)
    assert params["params"]["GaussianHead_0"]["raw_std"].shape == (2,)
    obs = _obs()
    categorical, _ = ORTHOGONAL["categorical"]
    logits = categorical.apply({"params": orthogonal_params["categorical"]}, obs)
    assert logits.shape == (B, 4)
    value, _ = ORTHOGONAL["value"]
    assert value.apply({"params": orthogonal_params["value"]}, obs).shape == (B,)


def test_initial_std_equals_init_std(gaussian):
    _, (_, std) = gaussian
    np.testing.assert_allclose(std, np.full((B, 2), 0.35), rtol=1e-6)


@pytest.mark.parametrize("init_std", [0.01, 0.05, 0.35, 1.0, 3.0, 20.0])
def test_inverse_softplus(init_std):
    raw = np.float32(feed_forward.inverse_softplus(init_std))
    np.testing.assert_allclose(jax.nn.softplus(raw), init_std, rtol=1e-6)


def test_initial_means_are_small(gaussian):
    _, (mean, _) = gaussian
    assert 0.0 < np.abs(mean).max() < 0.2
    obs = _obs(obs_shape=(376,))
    _, (mean, _) = _init_apply(feed_forward.GaussianPolicy(action_size=2), obs)
    assert 0.0 < np.abs(mean).max() < 0.2


def test_policy_output_init_multiplies_lecun_normal_by_factor():
    key = jax.random.key(3)
    lecun = nn.initializers.lecun_normal()(key, (100, 4))
    scaled = feed_forward.policy_output_init(False, 0.1)(key, (100, 4))
    np.testing.assert_allclose(scaled, 0.1 * lecun, rtol=1e-5)


def _assert_orthogonal(kernel, scale):
    kernel = np.asarray(kernel, np.float64)
    rows, cols = kernel.shape
    gram = kernel.T @ kernel if rows >= cols else kernel @ kernel.T
    np.testing.assert_allclose(gram, scale**2 * np.eye(min(rows, cols)), atol=1e-5 * scale**2)


ORTHOGONAL = {
    "gaussian": (feed_forward.GaussianPolicy(action_size=2, layers=(16, 8), orthogonal=True), 0.01),
    "categorical": (
        feed_forward.CategoricalPolicy(num_actions=4, layers=(16, 8), orthogonal=True),
        0.01,
    ),
    "value": (feed_forward.Value(layers=(16, 8), orthogonal=True), 1.0),
}


@pytest.fixture(scope="module")
def orthogonal_params():
    """Parameters of every module in ORTHOGONAL, initialised in one compiled call."""

    def init_all(key, obs):
        return {name: module.init(key, obs)["params"] for name, (module, _) in ORTHOGONAL.items()}

    return jax.jit(init_all)(jax.random.key(0), _obs())


@pytest.mark.parametrize("name", ORTHOGONAL)
def test_orthogonal_option(orthogonal_params, name):
    params = orthogonal_params[name]
    kernels = _kernels(params)
    hidden = [k for path, k in kernels.items() if "MLP" in path]
    output = [k for path, k in kernels.items() if "MLP" not in path]
    assert len(hidden) == 2 and len(output) == 1
    for kernel in hidden:
        _assert_orthogonal(kernel, np.sqrt(2.0))
    _assert_orthogonal(output[0], ORTHOGONAL[name][1])
    for bias in _biases(params):
        np.testing.assert_array_equal(bias, 0.0)


def test_default_init_is_not_orthogonal(gaussian):
    kernel = gaussian[0]["params"]["MLP_0"]["Dense_1"]["kernel"]
    with pytest.raises(AssertionError):
        _assert_orthogonal(kernel, np.sqrt(2.0))


def test_activation_is_used(orthogonal_params):
    obs = _obs()
    params = {"params": orthogonal_params["value"]}
    identity = feed_forward.Value(layers=(16, 8), activation=lambda x: x)
    linear = identity.apply(params, obs)
    np.testing.assert_allclose(identity.apply(params, 2.0 * obs), 2.0 * linear, rtol=1e-4)
    relu = feed_forward.Value(layers=(16, 8), activation=nn.relu)
    assert not np.allclose(relu.apply(params, obs), linear)

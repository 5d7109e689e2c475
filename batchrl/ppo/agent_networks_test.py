import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec
from batchrl.envs import spaces
from batchrl.networks import distributions, encoder
from batchrl.parts import normalizer
from batchrl.ppo import agent_networks
from batchrl.ppo import config as config_lib

CONFIG = config_lib.ClippedConfig(policy_layers=(8, 8), value_layers=(8,))
CUE = {"cue": env_spec.ObsLeaf((), "int32", env_spec.DISCRETE, (4,), (0,))}


def multi_discrete(nvec, start, action_shape):
    spec = env_spec.EnvSpec(
        CUE,
        discrete=True,
        action_shape=action_shape,
        num_actions=sum(nvec),
        action_nvec=nvec,
        action_start=start,
    )
    return agent_networks.Networks(CONFIG, spec)


def test_a_flat_box_gives_the_features_and_parameters_it_gave_before():
    # Before observations were trees, the networks took the normalised observation
    # [B, 3, 2] and flattened it: the same parameters from the same key, the same inputs.
    spec = env_spec.EnvSpec(env_spec.vector((3, 2)), discrete=False, action_shape=(2,))
    networks = agent_networks.Networks(config_lib.ClippedConfig(), spec)
    params = networks.init(jax.random.key(3))
    policy_key, value_key = jax.random.split(jax.random.key(3))
    obs = jnp.zeros((1, 3, 2), jnp.float32)
    before = {
        "policy": networks.policy_module.init(policy_key, obs),
        "value": networks.value_module.init(value_key, obs),
    }
    assert jax.tree.structure(params) == jax.tree.structure(before)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(before), strict=True):
        np.testing.assert_array_equal(a, b)
    batch = jax.random.normal(jax.random.key(4), (7, 3, 2)) * 3.0
    state = normalizer.update(normalizer.init((3, 2)), batch)
    expected = normalizer.normalize(state, batch, center=True, clip=5.0).reshape(7, 6)
    np.testing.assert_array_equal(networks.features(state, batch), expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nvec", "start", "action_shape"),
    [((3, 2), (1, -1), (2,)), ((2, 3, 4, 5), (0, 1, 2, 3), (2, 2))],
)
def test_multi_discrete_actions_are_independent_categoricals_shifted_by_their_start(
    nvec, start, action_shape
):
    networks = multi_discrete(nvec, start, action_shape)
    params = networks.init(jax.random.key(0))
    features = networks.features({"cue": None}, {"cue": jnp.arange(64) % 4})
    logits = networks.distribution(params, features)
    assert logits.shape == (64, sum(nvec))
    action = networks.sample(logits, jax.random.key(1))
    assert action.shape == (64, *action_shape) and action.dtype == jnp.int32
    elements = np.asarray(action).reshape(64, len(nvec))
    assert (elements >= 0).all() and (elements < np.asarray(nvec)).all()
    bounds = np.cumsum((0, *nvec))
    by_hand = sum(
        distributions.categorical_log_prob(logits[:, bounds[k] : bounds[k + 1]], elements[:, k])
        for k in range(len(nvec))
    )
    np.testing.assert_allclose(networks.log_prob(logits, action), by_hand, rtol=1e-6)
    assert networks.mode(logits).shape == (64, *action_shape)
    to_env = networks.to_env(action)
    np.testing.assert_array_equal(to_env, action + np.asarray(start).reshape(action_shape))
    assert networks.entropy(logits).shape == networks.kl(logits, logits).shape == (64,)


def test_a_discrete_action_is_shifted_by_its_start():
    spec = env_spec.EnvSpec(CUE, discrete=True, num_actions=3, action_start=(1,))
    networks = agent_networks.Networks(CONFIG, spec)
    np.testing.assert_array_equal(networks.to_env(jnp.array([0, 1, 2])), [1, 2, 3])
    unstarted = agent_networks.Networks(CONFIG, env_spec.EnvSpec(CUE, discrete=True, num_actions=3))
    np.testing.assert_array_equal(unstarted.to_env(jnp.array([0, 2])), [0, 2])


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_a_box_action_of_any_rank_comes_out_in_its_shape_and_bounds(shape):
    high = np.arange(2.0, 2.0 + math.prod(shape), dtype=np.float32).reshape(shape)
    space = gym.spaces.Box(-1.0, high)
    spec = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (3,)), space)
    networks = agent_networks.Networks(CONFIG, spec)
    rows = jnp.linspace(-1.5, 1.5, 4 * spec.action_size).reshape(4, spec.action_size)
    actions = np.asarray(networks.to_env(rows))  # Rows past [-1, 1] too: clipped.
    assert actions.shape == (4, *shape)
    assert all(space.contains(np.asarray(action, np.float32)) for action in actions)


def test_a_squashed_mean_stays_linear_on_elements_the_box_does_not_bound():
    # Bounded, unbounded, bounded on one side, and bounds float32 cannot span: a tanh mean
    # held the unbounded ones' actions inside (-1, 1).
    largest = np.finfo(np.float32).max
    space = gym.spaces.Box(
        np.array([-2.0, -np.inf, 0.0, -largest], np.float32),
        np.array([2.0, np.inf, np.inf, largest], np.float32),
    )
    tree = gym.spaces.Dict({"box": space, "pick": gym.spaces.Discrete(3)})
    for action_space in (space, tree):
        spec = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (3,)), action_space)
        config = config_lib.ClippedConfig(
            squash_mean=True, orthogonal_init=False, init_output_factor=100.0
        )
        networks = agent_networks.Networks(config, spec)
        assert networks.squashed == (True, False, False, False)
        params = networks.init(jax.random.key(0))
        obs = jax.random.normal(jax.random.key(1), (256, 3))
        out = networks.policy_module.apply(params["policy"], obs)
        mean = np.asarray(out["mean"] if isinstance(out, dict) else out[0])
        assert np.abs(mean[:, 0]).max() <= 1.0 < np.abs(mean[:, 1:]).max(axis=0).min()
    bounded = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-1.0, 1.0, (2,)))
    assert agent_networks.Networks(config, bounded).squashed is True
    unbounded = spaces.env_spec(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-np.inf, np.inf))
    assert agent_networks.Networks(config, unbounded).squashed is False


def image_networks(frame, **settings):
    """Networks for {"frame": frame, "speed": a 2-vector} and 3 discrete actions."""
    spec = env_spec.EnvSpec(
        {"frame": frame, "speed": env_spec.vector((2,))}, discrete=True, num_actions=3
    )
    return agent_networks.Networks(config_lib.ClippedConfig(**settings), spec)


GRID = env_spec.ObsLeaf((10, 10, 4), "float32", env_spec.IMAGE, low=0.0, high=1.0)
FRAME = env_spec.ObsLeaf((10, 10, 4), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
LEADING = env_spec.ObsLeaf((4, 10, 10), "uint8", env_spec.IMAGE, low=0.0, high=255.0)


def test_a_uint8_frame_a_float_grid_and_a_channels_first_frame_read_the_same():
    bits = jax.random.bernoulli(jax.random.key(1), 0.3, (5, 10, 10, 4))
    speed = jax.random.normal(jax.random.key(2), (5, 2))
    outputs = []
    for leaf, frame in [
        (GRID, bits.astype(jnp.float32)),
        (FRAME, bits.astype(jnp.uint8) * 255),
        (LEADING, jnp.moveaxis(bits.astype(jnp.uint8) * 255, -1, 1)),
    ]:
        networks = image_networks(leaf)
        params = networks.init(jax.random.key(0))
        obs = {"frame": frame, "speed": speed}
        features = networks.features(encoder.init_normalizer(networks.env_spec.observation), obs)
        logits = networks.distribution(params, features)
        assert logits.shape == (5, 3) and networks.value(params, features).shape == (5,)
        outputs.append((logits, networks.value(params, features)))
    for logits, value in outputs[1:]:
        np.testing.assert_array_equal(logits, outputs[0][0])
        np.testing.assert_array_equal(value, outputs[0][1])


@pytest.mark.parametrize("shared", [False, True])
def test_policy_and_value_read_images_through_their_own_cnns_or_one_shared(shared):
    networks = image_networks(FRAME, shared_encoder=shared)
    params = networks.init(jax.random.key(0))
    encoders = {"encoder"} if shared else {"policy_encoder", "value_encoder"}
    assert set(params) == {"policy", "value", *encoders}
    obs = {
        "frame": jax.random.randint(jax.random.key(1), (6, 10, 10, 4), 0, 256).astype(jnp.uint8),
        "speed": jnp.ones((6, 2)),
    }
    features = networks.features(encoder.init_normalizer(networks.env_spec.observation), obs)

    def value_loss(params):
        return jnp.sum(networks.value(params, features) ** 2)

    def policy_loss(params):
        return jnp.sum(networks.distribution(params, features) ** 2)

    def moved(grads):
        return {
            key: any(bool(jnp.any(g != 0)) for g in jax.tree.leaves(grads[key])) for key in grads
        }

    value_moves, policy_moves = (
        moved(jax.grad(value_loss)(params)),
        moved(jax.grad(policy_loss)(params)),
    )
    if shared:  # CleanRL's Atari agent: both losses train the one CNN.
        assert value_moves == {"policy": False, "value": True, "encoder": True}
        assert policy_moves == {"policy": True, "value": False, "encoder": True}
    else:
        assert value_moves == {
            "policy": False,
            "value": True,
            "policy_encoder": False,
            "value_encoder": True,
        }
        assert policy_moves == {
            "policy": True,
            "value": False,
            "policy_encoder": True,
            "value_encoder": False,
        }


def test_a_shared_cnn_run_once_for_both_heads_gives_their_values_and_gradients():
    networks = image_networks(FRAME, shared_encoder=True)
    params = networks.init(jax.random.key(0))
    obs = {
        "frame": jax.random.randint(jax.random.key(1), (6, 10, 10, 4), 0, 256).astype(jnp.uint8),
        "speed": jax.random.normal(jax.random.key(2), (6, 2)),
    }
    features = networks.features(encoder.init_normalizer(networks.env_spec.observation), obs)

    def loss(params, together):
        if together:
            logits, value = networks.distribution_and_value(params, features)
        else:
            logits, value = (
                networks.distribution(params, features),
                networks.value(params, features),
            )
        return jnp.sum(jax.nn.log_softmax(logits)[:, 1]) + jnp.sum(value**2), (logits, value)

    gradient = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)
    (_, apart), apart_grads = gradient(params, False)
    (_, together), together_grads = gradient(params, True)
    for a, b in zip(
        jax.tree.leaves((apart, apart_grads)),
        jax.tree.leaves((together, together_grads)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert any(bool(jnp.any(g != 0)) for g in jax.tree.leaves(together_grads["policy"]))


def test_images_flattened_into_the_mlp_when_told_and_a_network_that_cannot_fit_refused():
    networks = image_networks(FRAME, cnn="none", policy_layers=(8,))
    params = networks.init(jax.random.key(0))
    assert set(params) == {"policy", "value"}  # Pixels and speed straight into the MLPs.
    assert params["policy"]["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (402, 8)
    with pytest.raises(ValueError, match=r'cnn=\'nature\' needs .* obs\["frame"\] is 10 x 10'):
        image_networks(FRAME, cnn="nature")

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec
from batchrl.networks import cnn, encoder


def shapes(params):
    return {"/".join(k.key for k in path): leaf.shape for path, leaf in _flat(params)}


def _flat(params):
    return jax.tree_util.tree_flatten_with_path(params)[0]


def test_the_nature_cnn_makes_512_features_of_an_atari_frame_stack():
    net = cnn.network("nature")
    frames = jax.ShapeDtypeStruct((2, 84, 84, 4), jnp.float32)  # Shapes only: no compile.
    params = jax.eval_shape(net.init, jax.random.key(0), frames)
    assert jax.eval_shape(net.apply, params, frames).shape == (2, 512)
    # 84 -> 20 -> 9 -> 7 pixels a side through the three convolutions.
    assert shapes(params) == {
        "params/Conv_0/kernel": (8, 8, 4, 32),
        "params/Conv_0/bias": (32,),
        "params/Conv_1/kernel": (4, 4, 32, 64),
        "params/Conv_1/bias": (64,),
        "params/Conv_2/kernel": (3, 3, 64, 64),
        "params/Conv_2/bias": (64,),
        "params/Dense_0/kernel": (7 * 7 * 64, 512),
        "params/Dense_0/bias": (512,),
    }


def test_the_minatar_network_makes_128_features_of_a_grid():
    net = cnn.network("minatar")
    grids = jnp.ones((3, 10, 10, 7))
    params = net.init(jax.random.key(0), grids)
    features = net.apply(params, grids)
    assert features.shape == (3, 128) and bool(jnp.all(features >= 0.0))  # Ends in a ReLU.
    assert shapes(params) == {
        "params/Conv_0/kernel": (3, 3, 7, 16),
        "params/Conv_0/bias": (16,),
        "params/Dense_0/kernel": (8 * 8 * 16, 128),
        "params/Dense_0/bias": (128,),
    }


@pytest.mark.parametrize(
    ("side", "chosen"), [(84, "nature"), (36, "nature"), (35, "minatar"), (3, "minatar"), (2, None)]
)
def test_auto_chooses_the_network_by_image_size(side, chosen):
    assert cnn.choose("auto", (side, side + 5, 3)) == chosen
    assert cnn.choose("none", (side, side, 3)) is None


def test_a_network_asked_for_on_an_image_too_small_is_refused_naming_the_leaf():
    assert cnn.choose("minatar", (84, 84, 4)) == "minatar"  # Any size it fits.
    with pytest.raises(ValueError, match=r"cnn='nature' needs images of at least 36 pixels a "):
        cnn.choose("nature", (10, 10, 4), 'obs["grid"]')
    with pytest.raises(ValueError, match=r'obs\["grid"\] is 10 x 10; use cnn=\'auto\''):
        cnn.choose("nature", (10, 10, 4), 'obs["grid"]')
    with pytest.raises(ValueError, match="unknown cnn 'resnet': use one of"):
        cnn.choose("resnet", (84, 84, 4))


def test_the_torso_puts_one_cnn_on_each_image_beside_the_other_features():
    # Sorted keys: a 6x6 grid of 2 channels, a 3-vector, a channels-first 2x5x5 frame.
    spec = {
        "a_grid": env_spec.ObsLeaf((6, 6, 2), "float32", env_spec.IMAGE, low=0.0, high=1.0),
        "b_vector": env_spec.vector((3,)),
        "c_frame": env_spec.ObsLeaf((2, 5, 5), "uint8", env_spec.IMAGE, low=0.0, high=255.0),
    }
    parts = encoder.layout(spec)
    assert parts == (
        cnn.Part(72, (6, 6, 2), "minatar"),
        cnn.Part(3),
        cnn.Part(50, (5, 5, 2), "minatar"),
    )
    assert [cnn.output_size(part) for part in parts] == [128, 3, 128]
    torso = cnn.Torso(parts)
    features = jax.random.uniform(jax.random.key(1), (4, 125))
    params = torso.init(jax.random.key(0), features)
    out = torso.apply(params, features)
    assert out.shape == (4, 259)
    grid_net, frame_net = cnn.network("minatar"), cnn.network("minatar")
    grid = grid_net.apply(
        {"params": params["params"]["cnn_0"]}, features[:, :72].reshape(4, 6, 6, 2)
    )
    frame = frame_net.apply(
        {"params": params["params"]["cnn_2"]}, features[:, 75:].reshape(4, 5, 5, 2)
    )
    np.testing.assert_array_equal(out[:, :128], grid)
    np.testing.assert_array_equal(out[:, 128:131], features[:, 72:75])  # As they came.
    np.testing.assert_array_equal(out[:, 131:], frame)
    with pytest.raises(ValueError, match=r"Torso takes features \[N, 125\], got \(4, 124\)"):
        torso.apply(params, features[:, :124])

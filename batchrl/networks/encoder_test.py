import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import env_spec
from batchrl.networks import encoder
from batchrl.parts import normalizer

# One leaf of each kind, and an integer vector (normalised too); features in key order.
SPEC = {
    "a_vector": env_spec.vector((2,)),
    "b_discrete": env_spec.ObsLeaf((), "int32", env_spec.DISCRETE, (3,), (1,)),
    "c_multi": env_spec.ObsLeaf((2,), "int32", env_spec.MULTI_DISCRETE, (2, 3), (0, -1)),
    "d_binary": env_spec.ObsLeaf((3,), "bool", env_spec.BINARY),
    "e_image": env_spec.ObsLeaf((2, 1, 1), "uint8", env_spec.IMAGE, low=0.0, high=255.0),
    "f_counts": env_spec.vector((2,), "int32"),
}
OBS = {
    "a_vector": np.array([[1.5, -2.0], [0.0, 4.0]], np.float32),
    "b_discrete": np.array([3, 1], np.int32),
    "c_multi": np.array([[1, -1], [0, 1]], np.int32),
    "d_binary": np.array([[True, False, True], [False, False, True]]),
    "e_image": np.array([[0, 255], [51, 102]], np.uint8).reshape(2, 2, 1, 1),
    "f_counts": np.array([[4, -3], [0, 2]], np.int32),
}
# By hand: the vector as is (statistics of an empty stream), one-hot of 3 - 1 and 1 - 1
# over 3, one-hots of (1 | -1 + 1) over (2 | 3), the bits, pixels / 255, the counts as
# they are (statistics of an empty stream too).
EXPECTED = np.array(
    [
        [1.5, -2.0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0.0, 1.0, 4, -3],
        [0.0, 4.0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0.2, 0.4, 0, 2],
    ],
    np.float32,
)


def test_features_of_each_kind_by_hand():
    spec = env_spec.EnvSpec(SPEC, discrete=False, action_shape=(1,))
    norm = encoder.init_normalizer(SPEC)
    features = encoder.features(SPEC, norm, jax.tree.map(jnp.asarray, OBS))
    assert features.dtype == jnp.float32 and features.shape == (2, spec.feature_size) == (2, 17)
    np.testing.assert_allclose(features, EXPECTED, rtol=1e-6)


def test_the_normaliser_holds_statistics_of_vector_leaves_of_numbers_only():
    # Integers too: an Atari RAM of uint8 reached the MLP as raw 0..255 and did not learn.
    norm = encoder.init_normalizer(SPEC)
    vectors = {"a_vector", "f_counts"}
    assert {key for key, state in norm.items() if state is not None} == vectors
    updated = encoder.update_normalizer(SPEC, norm, OBS)
    assert {key for key, state in updated.items() if state is not None} == vectors
    np.testing.assert_allclose(updated["a_vector"].mean, [0.75, 1.0])
    np.testing.assert_allclose(updated["f_counts"].mean, [2.0, -0.5])
    assert float(updated["a_vector"].count) == 2.0
    features = encoder.features(SPEC, updated, OBS, clip=None)
    for key, where in (("a_vector", slice(0, 2)), ("f_counts", slice(15, 17))):
        x = OBS[key].astype(np.float32)
        normalised = (x - x.mean(0)) / np.std(x, axis=0, ddof=1)
        np.testing.assert_allclose(features[:, where], normalised, rtol=1e-6)
    np.testing.assert_allclose(features[:, 2:15], EXPECTED[:, 2:15], rtol=1e-6)
    # Not normalising reads the vectors as they are, whatever the statistics.
    raw = encoder.features(SPEC, updated, OBS, normalize=False)
    np.testing.assert_allclose(raw, EXPECTED, rtol=1e-6)
    assert encoder.normalized_states(updated) == [updated["a_vector"], updated["f_counts"]]
    bits = env_spec.vector((3,), "bool")  # A Box of bools: zeros and ones, as MultiBinary.
    assert not bits.normalized and env_spec.vector((3,), "uint8").normalized


def test_any_leading_axes_give_the_features_of_each_observation():
    norm = encoder.update_normalizer(SPEC, encoder.init_normalizer(SPEC), OBS)
    stacked = jax.tree.map(lambda x: np.stack([x, x[::-1], x]), OBS)  # [3, 2, ...]
    features = encoder.features(SPEC, norm, stacked)
    assert features.shape == (3, 2, 17)
    flat = encoder.features(SPEC, norm, jax.tree.map(lambda x: x.reshape(6, *x.shape[2:]), stacked))
    np.testing.assert_array_equal(features.reshape(6, 17), flat)
    one = encoder.features(SPEC, norm, jax.tree.map(lambda x: x[1], OBS))
    np.testing.assert_allclose(one, flat[1], rtol=1e-6)  # One row: XLA's own rounding.


def test_a_flat_box_is_normalised_then_flattened_as_before():
    leaf = env_spec.vector((3, 2))
    obs = jax.random.normal(jax.random.key(0), (5, 3, 2)) * 4.0 + 1.0
    state = normalizer.update(normalizer.init((3, 2)), obs)
    features = encoder.features(leaf, state, obs, clip=1.5)
    before = normalizer.normalize(state, obs, center=True, clip=1.5).reshape(5, -1)
    np.testing.assert_array_equal(features, before)
    np.testing.assert_array_equal(encoder.update_normalizer(leaf, state, obs).count, 10.0)


def test_tuples_multi_discrete_leaves_of_one_count_and_unbounded_images_normalised():
    spec = (
        env_spec.ObsLeaf((2, 2), "int32", env_spec.MULTI_DISCRETE, (2, 2, 2, 2), (0,) * 4),
        env_spec.ObsLeaf((1, 1, 2), "float32", env_spec.IMAGE),
    )
    obs = (np.array([[[0, 1], [1, 0]]], np.int32), np.array([[[[3.0, -1.0]]]], np.float32))
    norm = encoder.init_normalizer(spec)
    features = encoder.features(spec, norm, obs)  # An empty stream's statistics: as is.
    np.testing.assert_array_equal(features, [[1, 0, 0, 1, 0, 1, 1, 0, 3.0, -1.0]])
    # No bounds to scale it by: features around 1,000 reached the CNN raw, unnormalised.
    assert norm[0] is None and norm[1].mean.shape == (1, 1, 2)
    images = np.array([1000.0, 10.0, 1004.0, 30.0], np.float32).reshape(2, 1, 1, 2)
    updated = encoder.update_normalizer(spec, norm, (np.zeros((2, 2, 2), np.int32), images))
    features = encoder.features(spec, updated, (np.zeros((2, 2, 2), np.int32), images))
    np.testing.assert_allclose(features[:, 8:], [[-0.7071, -0.7071], [0.7071, 0.7071]], rtol=1e-4)


def test_a_leaf_of_the_wrong_shape_is_named():
    obs = {**OBS, "c_multi": np.zeros((2, 3), np.int32)}
    with pytest.raises(ValueError, match=r'obs\["c_multi"\] must be \[\.\.\., \*\(2,\)\]'):
        encoder.features(SPEC, encoder.init_normalizer(SPEC), obs)
    fewer = {key: value for key, value in OBS.items() if key != "f_counts"}
    with pytest.raises(ValueError, match="observation has 5 leaves and its normaliser 6"):
        encoder.features(SPEC, encoder.init_normalizer(SPEC), fewer)


@pytest.mark.parametrize(
    ("shape", "first"),
    [
        ((4, 84, 84), True),
        ((84, 84, 4), False),
        ((10, 10, 4), False),
        ((3, 7, 7), True),
        # A first dim that ties for the smallest: Gymnasium's order, channels last
        # (Seaquest-MinAtar's 10 x 10 grid of 10 channels; SB3's rule reads it first).
        ((10, 10, 10), False),
        ((7, 7, 9), False),
    ],
)
def test_image_channels_are_found_as_stable_baselines3_finds_them(shape, first):
    leaf = env_spec.ObsLeaf(shape, "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    assert encoder.channels_first(leaf) is first
    assert encoder.channels_first(leaf, "first") and not encoder.channels_first(leaf, "last")
    height_width = shape[1:] if first else shape[:2]
    channels = shape[0] if first else shape[2]
    assert encoder.image_shape(leaf) == (*height_width, channels)
    with pytest.raises(ValueError, match="unknown image_channels 'middle': use one of"):
        encoder.channels_first(leaf, "middle")


def test_a_channels_first_frame_gives_the_features_of_its_channels_last_twin():
    last = env_spec.ObsLeaf((4, 5, 3), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    first = env_spec.ObsLeaf((3, 4, 5), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    frames = jax.random.randint(jax.random.key(0), (2, 4, 5, 3), 0, 256).astype(jnp.uint8)
    leading = jnp.moveaxis(frames, -1, -3)  # [2, 3, 4, 5]
    expected = np.asarray(frames, np.float32).reshape(2, -1) / 255.0
    np.testing.assert_allclose(encoder.features(last, None, frames), expected, rtol=1e-6)
    np.testing.assert_allclose(encoder.features(first, None, leading), expected, rtol=1e-6)
    # Told the channels are last, the same array is read as a 3 x 4 image of 5 channels.
    as_last = encoder.features(first, None, leading, channels="last")
    np.testing.assert_allclose(as_last, np.asarray(leading, np.float32).reshape(2, -1) / 255.0)


def test_images_are_scaled_by_their_own_bounds_and_never_normalised():
    # A uint8 frame of 255 and MinAtar's float grid of 1.0 (a Box with high 1) give the
    # same input; so do 51 and 0.2, and a bool grid's True.
    frame = env_spec.ObsLeaf((2, 2, 1), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    grid = env_spec.ObsLeaf((2, 2, 1), "float32", env_spec.IMAGE, low=0.0, high=1.0)
    bits = env_spec.ObsLeaf((2, 2, 1), "bool", env_spec.IMAGE, low=0.0, high=1.0)
    spec = {"frame": frame, "grid": grid, "bits": bits}
    obs = {
        "frame": np.array([255, 0, 51, 255], np.uint8).reshape(1, 2, 2, 1),
        "grid": np.array([1.0, 0.0, 0.2, 1.0], np.float32).reshape(1, 2, 2, 1),
        "bits": np.array([True, False, False, True]).reshape(1, 2, 2, 1),
    }
    norm = encoder.init_normalizer(spec)
    assert norm == {"frame": None, "grid": None, "bits": None}
    assert encoder.update_normalizer(spec, norm, obs) == norm
    features = encoder.features(spec, norm, obs)  # Sorted keys: bits, frame, grid.
    np.testing.assert_allclose(features[0, 4:8], [1.0, 0.0, 0.2, 1.0], rtol=1e-6)
    np.testing.assert_allclose(features[0, 4:8], features[0, 8:], rtol=1e-6)
    np.testing.assert_array_equal(features[0, [4, 5, 7]], features[0, [8, 9, 11]])  # Exactly.
    np.testing.assert_array_equal(features[0, :4], [1.0, 0.0, 0.0, 1.0])


def test_an_image_too_small_as_image_channels_reads_it_names_the_setting():
    # Atari's (4, 84, 84) stack read channels last is 4 x 84: the cause was the setting.
    stack = {"frames": env_spec.ObsLeaf((4, 84, 84), "uint8", env_spec.IMAGE, low=0.0, high=255.0)}
    assert encoder.layout(stack, "first", "nature")[0].network == "nature"
    with pytest.raises(ValueError) as error:
        encoder.layout(stack, "last", "nature")
    assert str(error.value) == (
        "cnn='nature' needs images of at least 36 pixels a side, obs[\"frames\"] (4, 84, 84) read "
        "with image_channels='last' is 4 x 84; use cnn='auto' or a smaller network"
    )

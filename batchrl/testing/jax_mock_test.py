import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.testing import jax_mock


def test_the_dict_batch_steps_the_counting_episodes_in_its_specs_dtypes():
    durations = (1, 2, 3)
    flat, tree = jax_mock.CountingBatch(durations), jax_mock.DictCountingBatch(durations)
    expected = env_spec_lib.map_tree(
        lambda leaf: ((3, *leaf.shape), leaf.dtype), tree.env_spec.observation
    )
    flat_state, flat_obs = flat.init(jax.random.key(0))
    state, obs = tree.init(jax.random.key(0))
    action = jnp.ones((3, 2))
    for t in range(4):
        assert jax.tree.map(lambda a: (a.shape, a.dtype.name), obs) == expected
        np.testing.assert_array_equal(obs["vector"], flat_obs)
        np.testing.assert_array_equal(obs["step"], flat_state)
        image = np.broadcast_to(np.asarray(flat_state)[:, None, None, None], (3, 2, 2, 1))
        np.testing.assert_array_equal(obs["image"], image)
        flat_state, flat_step = flat.step(flat_state, action)
        state, step = tree.step(state, action)
        done = step.terminated | step.truncated
        np.testing.assert_array_equal(done, flat_step.terminated)
        np.testing.assert_array_equal(step.reward, flat_step.reward)
        flat_state, flat_obs = flat.reset(flat_state, flat_step.obs, jax.random.key(t), done)
        state, obs = tree.reset(state, step.obs, jax.random.key(t), done)
    np.testing.assert_array_equal(flat_state, [0, 0, 1])  # Four steps: 1 | 2 2 | 3 3 3 1.

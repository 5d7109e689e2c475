import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.parts import returns

T, B = 37, 6
DISCOUNT, LAMBDA = 0.9, 0.8


def gae_loop(reward, value, next_value, terminated, done, discount, lambda_):
    """Reference GAE of one sequence, a plain Python loop in float64."""
    advantage = np.zeros(len(reward))
    following = 0.0
    for t in reversed(range(len(reward))):
        bootstrap = 0.0 if terminated[t] else next_value[t]
        delta = reward[t] + discount * bootstrap - value[t]
        if done[t]:
            following = 0.0
        advantage[t] = delta + discount * lambda_ * following
        following = advantage[t]
    return advantage


def return_loop(reward, next_value, terminated, done, discount):
    """Reference bootstrapped return of one sequence, a plain Python loop in float64."""
    result = np.zeros(len(reward))
    for t in reversed(range(len(reward))):
        if terminated[t]:
            result[t] = reward[t]
        elif done[t] or t == len(reward) - 1:
            result[t] = reward[t] + discount * next_value[t]
        else:
            result[t] = reward[t] + discount * result[t + 1]
    return result


def rollout(seed, truncation):
    """A random time-major [T, B] rollout with terminations and (optionally) truncations.

    next_value[t] equals value[t + 1] within an episode and is an independent value of the
    episode's final observation where it ended, as a real rollout's would be.
    """
    rng = np.random.default_rng(seed)
    reward = rng.standard_normal((T, B)).astype(np.float32)
    value = rng.standard_normal((T, B)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.1
    truncated = rng.random((T, B)) < truncation
    done = terminated | truncated
    next_value = rng.standard_normal((T, B)).astype(np.float32)
    next_value[:-1] = np.where(done[:-1], next_value[:-1], value[1:])
    if truncation:
        assert np.any(truncated & ~terminated)
    else:
        assert not np.any(truncated)
    assert np.any(terminated)
    return reward, value, next_value, terminated, done


@pytest.fixture(params=["loop", "associative"])
def way(request, monkeypatch):
    """Each way `backward_affine` has: the CPU's loop, and the scan other devices run."""
    monkeypatch.setattr(returns, "backward_affine", getattr(returns, f"_{request.param}"))
    return request.param


def batched_gae(reward, value, next_value, terminated, done, discount, lambda_):
    in_axes = (1, 1, 1, 1, 1, None, None)
    fn = jax.jit(jax.vmap(returns.gae, in_axes=in_axes, out_axes=1))
    return fn(reward, value, next_value, terminated, done, discount, lambda_)


def batched_return(reward, next_value, terminated, done, discount):
    in_axes = (1, 1, 1, 1, None)
    fn = jax.jit(jax.vmap(returns.discounted_return, in_axes=in_axes, out_axes=1))
    return fn(reward, next_value, terminated, done, discount)


@pytest.mark.parametrize("truncation", [0.0, 0.1])
@pytest.mark.parametrize("seed", [0, 1])
def test_gae_matches_python_loop(seed, truncation, way):
    reward, value, next_value, terminated, done = rollout(seed, truncation)
    advantage = batched_gae(reward, value, next_value, terminated, done, DISCOUNT, LAMBDA)
    assert advantage.shape == (T, B) and advantage.dtype == jnp.float32
    for b in range(B):
        expected = gae_loop(
            reward[:, b],
            value[:, b],
            next_value[:, b],
            terminated[:, b],
            done[:, b],
            DISCOUNT,
            LAMBDA,
        )
        np.testing.assert_allclose(advantage[:, b], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("truncation", [0.0, 0.1])
@pytest.mark.parametrize("seed", [0, 1])
def test_discounted_return_matches_python_loop(seed, truncation, way):
    reward, _, next_value, terminated, done = rollout(seed, truncation)
    result = batched_return(reward, next_value, terminated, done, DISCOUNT)
    assert result.shape == (T, B) and result.dtype == jnp.float32
    for b in range(B):
        expected = return_loop(
            reward[:, b], next_value[:, b], terminated[:, b], done[:, b], DISCOUNT
        )
        np.testing.assert_allclose(result[:, b], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("truncation", [0.0, 0.1])
def test_return_equals_gae_with_lambda_one_plus_value(truncation):
    reward, value, next_value, terminated, done = rollout(2, truncation)
    advantage = batched_gae(reward, value, next_value, terminated, done, DISCOUNT, 1.0)
    result = batched_return(reward, next_value, terminated, done, DISCOUNT)
    np.testing.assert_allclose(result, advantage + value, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    # Episode one: steps 0-1, truncated after step 1, its final observation worth 10.
    # Episode two: steps 2-3, terminated after step 3; the 10 after it must be ignored.
    reward = jnp.array([1.0, 1.0, 1.0, 1.0])
    value = jnp.array([2.0, 4.0, 2.0, 4.0])
    next_value = jnp.array([4.0, 10.0, 4.0, 10.0])
    terminated = jnp.array([False, False, False, True])
    truncated = jnp.array([False, True, False, False])
    done = terminated | truncated
    advantage = returns.gae(reward, value, next_value, terminated, done, 0.5, 0.5)
    # A_1 = 1 + 0.5 * 10 - 4 = 2;   A_0 = (1 + 0.5 * 4 - 2) + 0.25 * 2 = 1.5
    # A_3 = 1 + 0 - 4 = -3;         A_2 = (1 + 0.5 * 4 - 2) + 0.25 * -3 = 0.25
    np.testing.assert_array_equal(advantage, [1.5, 2.0, 0.25, -3.0])
    result = returns.discounted_return(reward, next_value, terminated, done, 0.5)
    # G_1 = 1 + 0.5 * 10 = 6;  G_0 = 1 + 0.5 * 6 = 4;  G_3 = 1;  G_2 = 1 + 0.5 * 1 = 1.5
    np.testing.assert_array_equal(result, [4.0, 6.0, 1.5, 1.0])
    # The same step terminated instead of truncated: no bootstrap from the 10.
    terminated_early = jnp.array([False, True, False, True])
    advantage = returns.gae(reward, value, next_value, terminated_early, done, 0.5, 0.5)
    np.testing.assert_array_equal(advantage, [0.25, -3.0, 0.25, -3.0])
    result = returns.discounted_return(reward, next_value, terminated_early, done, 0.5)
    np.testing.assert_array_equal(result, [1.5, 1.0, 1.5, 1.0])


def test_unfinished_tail_bootstraps_from_last_next_value():
    reward = jnp.array([1.0, 1.0])
    next_value = jnp.array([0.0, 8.0])
    no = jnp.array([False, False])
    result = returns.discounted_return(reward, next_value, no, no, 0.5)
    np.testing.assert_array_equal(result, [3.5, 5.0])
    advantage = returns.gae(reward, jnp.zeros(2), next_value, no, no, 0.5, 1.0)
    np.testing.assert_array_equal(advantage, [3.5, 5.0])


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\[T\]"):
        returns.gae(jnp.zeros(3), jnp.zeros(4), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), 0.9, 0.9)
    with pytest.raises(ValueError, match=r"\[T\]"):
        returns.discounted_return(
            jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.zeros((3, 2)), 0.9
        )


def test_a_cpu_runs_the_loop_and_the_scan_agrees_over_an_episode_of_1000_steps():
    # Humanoid's episodes in the seed's episode memory: 1,000 steps, GAE's usual factors.
    rng = np.random.default_rng(3)
    scale = jnp.asarray(0.99 * 0.95 * (rng.random((1000, 4)) > 0.01), jnp.float32)
    offset = jnp.asarray(rng.standard_normal((1000, 4)), jnp.float32)

    def batched(fn):
        return jax.jit(jax.vmap(fn, in_axes=1, out_axes=1))(scale, offset)

    loop = batched(returns._loop)
    np.testing.assert_array_equal(batched(returns.backward_affine), loop)
    expected = np.zeros((1001, 4))
    for t in reversed(range(1000)):
        expected[t] = offset[t] + scale[t] * expected[t + 1]
    np.testing.assert_allclose(loop, expected[:-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batched(returns._associative), expected[:-1], rtol=1e-5, atol=1e-5)

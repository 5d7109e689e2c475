import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.ppo import losses


def test_penalty_rule():
    target = 0.01
    assert float(losses.update_penalty(jnp.array(1.0), jnp.array(0.02), target)) == 1.5
    assert float(losses.update_penalty(jnp.array(1.0), jnp.array(0.005), target)) == pytest.approx(
        1 / 1.5
    )
    assert float(losses.update_penalty(jnp.array(1.0), jnp.array(0.01), target)) == 1.0
    assert float(losses.update_penalty(jnp.array(1.0), jnp.array(0.013), target)) == 1.0


def test_the_penalty_never_falls_to_zero_and_rises_again_from_its_floor():
    target, penalty = 0.01, jnp.array(1.0)
    for _ in range(400):  # 1.5**-400 underflows float32 to exactly zero without a floor.
        penalty = losses.update_penalty(penalty, jnp.array(0.0), target)
    assert float(penalty) == pytest.approx(losses.MIN_PENALTY)
    for _ in range(18):
        penalty = losses.update_penalty(penalty, jnp.array(0.05), target)
    assert float(penalty) > 1.0


def test_kl_penalty_loss_matches_the_formula_and_masks_padding():
    rng = np.random.default_rng(0)
    log_prob, old, advantage, kl = (rng.normal(size=(4, 5)).astype(np.float32) for _ in range(4))
    kl = np.abs(kl) * 0.05
    mask = rng.uniform(size=(4, 5)) < 0.7
    loss = losses.kl_penalty_policy_loss(
        log_prob, old, advantage, kl, jnp.array(2.0), 0.01, 2.0, 1000.0, mask
    )
    ratio = np.exp(log_prob - old)[mask]
    mean_kl = kl[mask].mean()
    expected = -(ratio * advantage[mask]).mean() + 2.0 * mean_kl
    held = [row for row in range(4) if mask[row].any()]  # A row's KL over its 5 steps:
    expected += 1000.0 * np.mean([max(0.0, kl[r][mask[r]].sum() / 5 - 0.02) ** 2 for r in held])
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_the_kl_cutoff_holds_back_a_chunk_that_drifts_while_the_others_hold_still():
    # As the seed's, each row's (an episode's chunk's) mean KL is cut off: one of 30 rows
    # at 0.3 a step, the others at 0.001, leave the batch's mean KL (0.011) under the
    # cutoff of 0.02, which the cutoff on that mean never passed.
    kl = np.full((30, 50), 0.001, np.float32)
    kl[0] = 0.3
    zeros = np.zeros_like(kl)

    def cutoff(kl):
        return losses.kl_penalty_policy_loss(
            zeros, zeros, zeros, kl, jnp.array(0.0), 0.01, 2.0, 1000.0
        )

    assert float(cutoff(jnp.asarray(kl))) == pytest.approx(1000.0 * 0.28**2 / 30, rel=1e-5)
    gradient = jax.grad(cutoff)(jnp.asarray(kl))
    assert float(gradient[0, 0]) > 0.0 and float(gradient[1, 0]) == 0.0


@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_a_padded_step_whose_ratio_overflows_leaves_the_gradient_finite(objective):
    # Padding in episode memory holds no real action, and no loss holds the policy there:
    # within one update its log-probabilities can drift 150 nats apart. exp overflows
    # there; the gradient must not be NaN.
    old = jnp.array([0.0, -200.0])
    advantage, kl, mask = jnp.array([1.0, 0.0]), jnp.array([0.01, 0.0]), jnp.array([True, False])

    def loss(log_prob):
        if objective == "kl_penalty":
            penalty = jnp.array(1.0)
            return losses.kl_penalty_policy_loss(
                log_prob, old, advantage, kl, penalty, 0.01, 2.0, 1000.0, mask
            )
        return losses.clipped_policy_loss(log_prob, old, advantage, 0.2, mask)

    gradient = jax.grad(loss)(jnp.array([0.1, -50.0]))
    # Only the valid step moves the loss, its ratio inside the clip range:
    # d(-ratio * advantage) / d(log_prob) = -ratio.
    assert float(gradient[0]) == pytest.approx(-np.exp(0.1), rel=1e-6)
    assert float(gradient[1]) == 0.0


def test_clipped_loss_ignores_ratios_beyond_the_clip_in_the_improving_direction():
    advantage = np.array([1.0, -1.0], np.float32)
    old = np.zeros(2, np.float32)
    log_prob = np.log(np.array([1.5, 0.5], np.float32))
    loss = losses.clipped_policy_loss(log_prob, old, advantage, 0.2)
    assert float(loss) == pytest.approx(-(1.2 * 1.0 + 0.8 * -1.0) / 2)


def test_value_loss_clipping_takes_the_larger_error():
    value, old, target = jnp.array([2.0]), jnp.array([0.0]), jnp.array([3.0])
    assert float(losses.value_loss(value, target)) == pytest.approx(0.5)
    assert float(losses.value_loss(value, target, old, clip=0.5)) == pytest.approx(0.5 * 2.5**2)


def test_standardize_over_valid_entries_only():
    x = jnp.array([1.0, 2.0, 3.0, 100.0])
    mask = jnp.array([True, True, True, False])
    out = np.asarray(losses.standardize(x, mask))
    assert out[3] == 0.0
    assert out[:3].mean() == pytest.approx(0.0, abs=1e-6)
    assert out[:3].std() == pytest.approx(1.0, rel=1e-4)


def test_clip_fraction_counts_ratios_outside_the_clip_range():
    old = jnp.zeros(4)
    new = jnp.log(jnp.asarray([1.0, 1.19, 1.21, 0.7]))
    assert float(losses.clip_fraction(new, old, 0.2)) == 0.5

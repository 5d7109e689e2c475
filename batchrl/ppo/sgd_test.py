import jax
import jax.numpy as jnp
import numpy as np
import optax

from batchrl.ppo import losses, sgd


def _fit(valid_rows, rows=16, epochs=3, batch_size=4):
    """Least squares on `rows` rows, padding rows masked out of the loss as the agents do."""
    x = jax.random.normal(jax.random.key(1), (rows, 3))
    valid = jnp.ones(rows, bool) if valid_rows is None else valid_rows
    data = {"x": x, "y": x @ jnp.array([1.0, -2.0, 0.5]), "valid": valid}

    def loss(params, batch):
        error = (batch["x"] @ params - batch["y"]) ** 2
        value = losses.masked_mean(error, batch["valid"])
        return value, {"loss": value}

    tx = sgd.optimizer(1e-2, None)
    params = jnp.zeros(3)
    return sgd.run_epochs(
        tx, params, tx.init(params), data, loss, jax.random.key(0),
        epochs=epochs, batch_size=batch_size, valid_rows=valid_rows,
    )  # fmt: skip


def test_with_every_row_valid_the_steps_are_the_plain_ones():
    plain, _, plain_metrics = _fit(None)
    masked, _, masked_metrics = _fit(jnp.ones(16, bool))
    np.testing.assert_array_equal(plain, masked)
    np.testing.assert_array_equal(plain_metrics["loss"], masked_metrics["loss"])


def test_minibatches_of_padding_take_no_step():
    # 5 valid rows of 16 in minibatches of 4: two minibatches an epoch hold data (the
    # second topped up with padding), the other two are skipped.
    valid_rows = jnp.arange(16) % 3 == 0  # Rows 0, 3, 6, 9, 12, 15: 6 valid.
    valid_rows = valid_rows.at[15].set(False)
    params, opt_state, metrics = _fit(valid_rows)
    assert int(optax.tree.get(opt_state, "count")) == 3 * 2
    used = sgd.used_minibatches(valid_rows, 4)
    np.testing.assert_array_equal(used, [True, True, False, False])
    assert (metrics["loss"][:, :2] > 0).all() and (metrics["loss"][:, 2:] == 0).all()
    assert jnp.isfinite(params).all()


def test_padding_rows_do_not_change_the_fit():
    # The same 4 valid rows, alone or among 12 padding rows with garbage targets: the
    # valid rows come first in every epoch and fill one minibatch, so the fits agree
    # up to the order of rows within it.
    x = jax.random.normal(jax.random.key(2), (16, 3))
    y = jnp.where(jnp.arange(16) < 4, x @ jnp.array([1.0, -2.0, 0.5]), 1e6)
    valid_rows = jnp.arange(16) < 4

    def loss(params, batch):
        error = (batch["x"] @ params - batch["y"]) ** 2
        return losses.masked_mean(error, batch["valid"]), {}

    tx = sgd.optimizer(1e-2, None)
    params = jnp.zeros(3)
    fits = []
    for rows, valid in ((4, None), (16, valid_rows)):
        data = {"x": x[:rows], "y": y[:rows], "valid": jnp.arange(rows) < 4}
        fit, _, _ = sgd.run_epochs(
            tx, params, tx.init(params), data, loss, jax.random.key(0),
            epochs=5, batch_size=4, valid_rows=valid,
        )  # fmt: skip
        fits.append(fit)
    np.testing.assert_allclose(fits[0], fits[1], rtol=1e-5)


def test_map_rows_computes_the_valid_rows_and_skips_blocks_without_one():
    data = {"x": jnp.arange(10.0).reshape(5, 2)}
    valid_rows = jnp.array([False, True, False, False, True])
    out = sgd.map_rows(lambda part: part["x"].sum(axis=1) * 10, data, valid_rows, block=2)
    # Valid rows 1 and 4 form the first block; rows 0, 2 in the second; row 3 in the third.
    np.testing.assert_array_equal(out, [0.0, 50.0, 0.0, 0.0, 170.0])
    out = sgd.map_rows(lambda part: part["x"][:, 0] + 1, data, valid_rows, block=3)
    # A block that holds a valid row computes its invalid rows too (row 0 beside 1 and 4).
    np.testing.assert_array_equal(out, [1.0, 3.0, 0.0, 0.0, 9.0])

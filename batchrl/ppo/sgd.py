"""The SGD loop both PPO objectives share: epochs of shuffled minibatches, the loss passed in.

Each objective builds its rows (steps, or chunks of episodes) and its loss; this file
owns the shuffling, the optimiser steps, the optional early stop on KL, and the
per-epoch refresh of the data (advantages recomputed with the latest value net).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

Batch = dict[str, Any]
LossFn = Callable[[Any, Batch], tuple[jax.Array, dict[str, jax.Array]]]


def optimizer(learning_rate: float, max_grad_norm: float | None) -> optax.GradientTransformation:
    """Adam, after clipping the global gradient norm when `max_grad_norm` is set."""
    adam = optax.adam(learning_rate, eps=1e-5)
    if max_grad_norm is None:
        return adam
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)


def run_epochs(
    tx: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    data: Batch,
    loss_fn: LossFn,
    key: jax.Array,
    *,
    epochs: int,
    batch_size: int,
    refresh: Callable[[Any, Batch], Batch] | None = None,
    target_kl: float | None = None,
    step_scale: jax.Array | float = 1.0,
    devices: int = 1,
    valid_rows: jax.Array | None = None,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`epochs` passes over the rows of `data` (leading axis) in shuffled minibatches.

    Each minibatch of `batch_size` rows takes one step of `tx`, scaled by `step_scale`;
    rows that do not fill the last minibatch of an epoch sit that epoch out. `refresh`
    recomputes data from the params before every epoch. With `target_kl`, no step is
    taken once a minibatch's "train/kl" exceeded it. Returns the params, the optimiser
    state and the metrics of every step, [epochs, minibatches] each, with the gradient
    norm as "train/grad_norm".

    `valid_rows` ([rows] bool) marks the rows that hold data; the others are padding.
    Each epoch then shuffles the valid rows ahead of the padding and takes a step only
    for minibatches that hold a valid row (`used_minibatches` of them, the last one
    topped up with padding rows), so a memory of short episodes costs what its data
    does. A skipped minibatch leaves params and optimiser state alone and reports zero
    metrics. With every row valid the steps are those without `valid_rows`.

    `devices` > 1 splits each minibatch's rows over that many local devices, the params
    copied to each (data parallel): XLA computes the same loss and gradient as on one
    device, summing the devices' parts.
    """
    rows = jax.tree.leaves(data)[0].shape[0]
    num_batches = rows // batch_size
    split = data_parallel(devices, batch_size)

    # The data rides in the loop's carry only when epochs change it; otherwise the loop
    # reads it as a constant, as a closure.
    def minibatch_step(carry: tuple, indices: jax.Array) -> tuple[tuple, dict]:
        if valid_rows is None:
            return sgd_step(carry, indices)
        _, metrics = jax.eval_shape(sgd_step, carry, indices)
        skip = lambda carry, _: (carry, jax.tree.map(jnp.zeros_like, metrics))  # noqa: E731
        return jax.lax.cond(valid_rows[indices[0]], sgd_step, skip, carry, indices)

    def sgd_step(carry: tuple, indices: jax.Array) -> tuple[tuple, dict]:
        params, opt_state, stopped, refreshed = carry
        batch = jax.tree.map(lambda x: x[indices], data if refreshed is None else refreshed)
        if split is not None:
            params = jax.lax.with_sharding_constraint(params, split.replicated)
            batch = jax.lax.with_sharding_constraint(batch, split.rows)
        grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch)
        updates, new_opt_state = tx.update(grads, opt_state, params)
        if not isinstance(step_scale, float) or step_scale != 1.0:
            updates = jax.tree.map(lambda u: u * step_scale, updates)
        new_params = optax.apply_updates(params, updates)
        metrics["train/grad_norm"] = optax.tree.norm(grads)
        if target_kl is None:
            return (new_params, new_opt_state, stopped, refreshed), metrics
        keep = lambda new, old: jax.tree.map(  # noqa: E731
            lambda a, b: jnp.where(stopped, b, a), new, old
        )
        params, opt_state = keep(new_params, params), keep(new_opt_state, opt_state)
        stopped = stopped | (metrics["train/kl"] > target_kl)
        return (params, opt_state, stopped, refreshed), metrics

    def epoch(carry: tuple, key: jax.Array) -> tuple[tuple, dict]:
        params, opt_state, stopped, refreshed = carry
        if refresh is not None:
            refreshed = refresh(params, refreshed)
        order = jax.random.permutation(key, rows)
        if valid_rows is not None:  # Valid rows first, each part in shuffled order.
            order = order[jnp.argsort(~valid_rows[order], stable=True)]
        order = order[: num_batches * batch_size]
        carry = (params, opt_state, stopped, refreshed)
        return jax.lax.scan(minibatch_step, carry, order.reshape(num_batches, batch_size))

    carry = (params, opt_state, jnp.zeros((), bool), None if refresh is None else data)
    (params, opt_state, _, _), metrics = jax.lax.scan(epoch, carry, jax.random.split(key, epochs))
    return params, opt_state, metrics


def map_rows(
    function: Callable[[Batch], Any], data: Batch, valid_rows: jax.Array, block: int
) -> Any:
    """`function` of the rows of `data` that `valid_rows` marks, `block` rows at a time.

    Rows are taken valid ones first; a block that holds no valid row is not computed, so
    a memory of short episodes costs what its steps do, not what its padding would. A
    block's invalid rows are computed with it. Returns `function`'s outputs for every row,
    [rows, ...] each, zero for rows in blocks that were not computed.
    """
    rows = valid_rows.shape[0]
    blocks = -(-rows // block)
    order = jnp.argsort(~valid_rows, stable=True)
    # Past the last row: gathered as the last row, never written back.
    order = jnp.concatenate([order, jnp.full((blocks * block - rows,), rows, order.dtype)])
    taken = jax.tree.map(lambda x: x[:block], data)
    shapes = jax.eval_shape(function, taken)

    def one_block(indices: jax.Array) -> Any:
        def compute() -> Any:
            return function(jax.tree.map(lambda x: x[jnp.minimum(indices, rows - 1)], data))

        def skip() -> Any:
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        return jax.lax.cond(valid_rows[indices[0] % rows] & (indices[0] < rows), compute, skip)

    computed = jax.lax.map(one_block, order.reshape(blocks, block))

    def place(shape: jax.ShapeDtypeStruct, values: jax.Array) -> jax.Array:
        values = values.reshape(blocks * block, *values.shape[2:])
        return jnp.zeros((rows, *shape.shape[1:]), shape.dtype).at[order].set(values, mode="drop")

    return jax.tree.map(place, shapes, computed)


def used_minibatches(valid_rows: jax.Array, batch_size: int) -> jax.Array:
    """[minibatches] bool: which minibatches of an epoch `run_epochs` steps on."""
    num_batches = valid_rows.shape[0] // batch_size
    return jnp.arange(num_batches) * batch_size < valid_rows.sum()


@dataclasses.dataclass(frozen=True)
class Split:
    """How a minibatch is laid out over devices: rows split, parameters copied."""

    rows: jax.sharding.NamedSharding
    replicated: jax.sharding.NamedSharding


def data_parallel(devices: int, batch_size: int) -> Split | None:
    """The layout of minibatches of `batch_size` rows over `devices` local devices (None: one)."""
    if devices == 1:
        return None
    available = jax.local_device_count()
    if not 1 <= devices <= available:
        raise ValueError(
            f"learner_devices={devices}, but this process has {available} local device(s) "
            f"(on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N; a resume "
            f"may set learner_devices anew)"
        )
    if batch_size % devices:
        raise ValueError(
            f"minibatches of {batch_size} rows do not split over learner_devices={devices}"
        )
    mesh = jax.sharding.Mesh(jax.local_devices()[:devices], ("data",))
    spec = jax.sharding.PartitionSpec
    return Split(
        rows=jax.sharding.NamedSharding(mesh, spec("data")),
        replicated=jax.sharding.NamedSharding(mesh, spec()),
    )

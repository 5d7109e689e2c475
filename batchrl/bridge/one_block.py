"""One block: the pure work of a compiled step run as a single node between host calls.

XLA's CPU runtime runs independent operations of a loop body concurrently on its thread
pool. When the body also calls the host (worker envs), every hand-off between threads is
slow; grouped into one conditional, the pure part of a step is a single node and the body
runs in order on one thread, several times faster per step (a policy whose network and
noise are independent: 66 us a step, 18 us as one block). Both branches are the same
function, so the result never depends on the predicate.

Only what the function changes leaves the conditional: a value it returns untouched
(policy parameters, say) is taken from its input, so XLA never copies it through the
conditional's result at every step.

A trick (`batchrl.tricks`, "one_block"): turned off, the function runs as a plain call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core

from batchrl import tricks


def run(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` as one conditional; leaves returned unchanged skip it."""
    if not tricks.on("one_block"):
        return function(*args)
    flat_args, in_tree = jax.tree.flatten(args)

    def flat_function(*flat: Any) -> Any:
        return function(*jax.tree.unflatten(in_tree, flat))

    closed, out_shape = jax.make_jaxpr(flat_function, return_shape=True)(*flat_args)
    out_tree = jax.tree.structure(out_shape)
    invars = closed.jaxpr.invars
    passed = {}  # Output position -> the input position it returns unchanged.
    for position, var in enumerate(closed.jaxpr.outvars):
        if isinstance(var, core.Var) and var in invars:
            passed[position] = invars.index(var)
    changed = [p for p in range(len(closed.jaxpr.outvars)) if p not in passed]

    def branch(*flat: Any) -> list[Any]:
        outputs = jax.tree.leaves(flat_function(*flat))
        return [outputs[p] for p in changed]

    # True, but behind a barrier the compiler does not fold, so the conditional stays.
    always = jax.lax.optimization_barrier(jnp.asarray(True))
    computed = iter(jax.lax.cond(always, branch, branch, *flat_args))
    outputs = [
        flat_args[passed[p]] if p in passed else next(computed)
        for p in range(len(closed.jaxpr.outvars))
    ]
    return jax.tree.unflatten(out_tree, outputs)

"""A policy over an action tree: one float row of every leaf's elements, a head a leaf.

An env whose action is a tree (`EnvSpec.action`: `Dict`s and `Tuple`s of `Box`,
`Discrete`, `MultiDiscrete` and `MultiBinary` leaves, a parameterised action say) gets a
distribution per leaf from one policy MLP (`feed_forward.TreePolicy`): a diagonal
Gaussian for a `Box` (its mean from the MLP, a state-independent std), a categorical for
a `Discrete`, independent categoricals for a `MultiDiscrete`, independent Bernoullis for
a `MultiBinary`. Its parameters are {"mean", "std"} over the Box leaves' elements and
{"logits"} over the others' values or bits, leaf after leaf in `env_spec.leaves` order.

The action the policy takes, stores and scores is one float32 row [..., D] of the
leaves' elements in the same order, so storage and both objectives treat it as a `Box`
action (integers are exact in float32 up to 2**24, which `ActionLeaf` checks). Its
log-prob, entropy and KL are sums over the leaves. `to_env` maps a row onto the env's
tree: each leaf's shape and dtype, a Box's bounds, a discrete leaf's start.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import ActionLeaf
from batchrl.networks import distributions


@dataclasses.dataclass(frozen=True)
class Head:
    """One leaf's stretch of the action row and of its distribution's parameters."""

    leaf: ActionLeaf
    row: int  # Where its elements start in the action row.
    params: int  # Where its means (a Box) or logits (any other) start.

    @property
    def gaussian(self) -> bool:
        return self.leaf.kind == env_spec_lib.VECTOR

    def elements(self, row: jax.Array) -> jax.Array:
        """Its elements [..., size] of action rows [..., D]."""
        return row[..., self.row : self.row + self.leaf.size]

    def parameters(self, dist: dict[str, jax.Array]) -> Any:
        """Its (mean, std) or logits of the tree's distribution parameters."""
        end = self.params + self.leaf.policy_outputs
        if self.gaussian:
            return dist["mean"][..., self.params : end], dist["std"][..., self.params : end]
        return dist["logits"][..., self.params : end]


def heads(tree: Any) -> list[Head]:
    """A `Head` for each leaf of an action tree, in `env_spec.leaves` order."""
    found, row, means, logits = [], 0, 0, 0
    for leaf in env_spec_lib.leaves(tree):
        gaussian = leaf.kind == env_spec_lib.VECTOR
        found.append(Head(leaf, row, means if gaussian else logits))
        row += leaf.size
        means += leaf.policy_outputs if gaussian else 0
        logits += 0 if gaussian else leaf.policy_outputs
    return found


def sizes(tree: Any) -> tuple[int, int]:
    """(means, logits): the outputs the policy's head makes for an action tree."""
    found = heads(tree)
    means = sum(h.leaf.policy_outputs for h in found if h.gaussian)
    return means, sum(h.leaf.policy_outputs for h in found if not h.gaussian)


def _each(tree: Any, dist: dict, per_head, combine) -> jax.Array:
    return combine([per_head(head, head.parameters(dist)) for head in heads(tree)])


def _summed(parts: list[jax.Array]) -> jax.Array:
    return sum(parts[1:], parts[0])


def _row(parts: list[jax.Array]) -> jax.Array:
    return jnp.concatenate([part.astype(jnp.float32) for part in parts], axis=-1)


def _draw(head: Head, params: Any, key: jax.Array) -> jax.Array:
    kind = head.leaf.kind
    if kind == env_spec_lib.VECTOR:
        return distributions.gaussian_sample(key, *params)
    if kind == env_spec_lib.DISCRETE:
        return distributions.categorical_sample(key, params)[..., None]
    if kind == env_spec_lib.MULTI_DISCRETE:
        return distributions.multi_categorical_sample(key, params, head.leaf.num_values)
    return distributions.bernoulli_sample(key, params)


def sample(tree: Any, dist: dict, key: jax.Array) -> jax.Array:
    """Action rows [..., D] drawn leaf by leaf, each leaf from its own key."""
    keys = jax.random.split(key, len(heads(tree)))
    parts = [_draw(h, h.parameters(dist), k) for h, k in zip(heads(tree), keys, strict=True)]
    return _row(parts)


def _mode(head: Head, params: Any) -> jax.Array:
    kind = head.leaf.kind
    if kind == env_spec_lib.VECTOR:
        return params[0]
    if kind == env_spec_lib.DISCRETE:
        return distributions.categorical_mode(params)[..., None]
    if kind == env_spec_lib.MULTI_DISCRETE:
        return distributions.multi_categorical_mode(params, head.leaf.num_values)
    return distributions.bernoulli_mode(params)


def mode(tree: Any, dist: dict) -> jax.Array:
    """The most probable action rows [..., D]: each Box leaf's mean, each other's mode."""
    return _each(tree, dist, _mode, _row)


def log_prob(tree: Any, dist: dict, row: jax.Array) -> jax.Array:
    """[...] the sum over the leaves of the log-probability of their elements of `row`."""

    def one(head: Head, params: Any) -> jax.Array:
        x, kind = head.elements(row), head.leaf.kind
        if kind == env_spec_lib.VECTOR:
            return distributions.gaussian_log_prob(*params, x)
        if kind == env_spec_lib.DISCRETE:
            return distributions.categorical_log_prob(params, x[..., 0])
        if kind == env_spec_lib.MULTI_DISCRETE:
            return distributions.multi_categorical_log_prob(params, x, head.leaf.num_values)
        return distributions.bernoulli_log_prob(params, x)

    return _each(tree, dist, one, _summed)


def entropy(tree: Any, dist: dict) -> jax.Array:
    """[...] the sum of the leaves' entropies."""

    def one(head: Head, params: Any) -> jax.Array:
        kind = head.leaf.kind
        if kind == env_spec_lib.VECTOR:
            return distributions.gaussian_entropy(*params)
        if kind == env_spec_lib.DISCRETE:
            return distributions.categorical_entropy(params)
        if kind == env_spec_lib.MULTI_DISCRETE:
            return distributions.multi_categorical_entropy(params, head.leaf.num_values)
        return distributions.bernoulli_entropy(params)

    return _each(tree, dist, one, _summed)


def kl(tree: Any, old: dict, new: dict) -> jax.Array:
    """[...] KL(old || new), the sum of the leaves' KLs."""
    total = []
    for head in heads(tree):
        p, q, kind = head.parameters(old), head.parameters(new), head.leaf.kind
        if kind == env_spec_lib.VECTOR:
            total.append(distributions.gaussian_kl(*p, *q))
        elif kind == env_spec_lib.DISCRETE:
            total.append(distributions.categorical_kl(p, q))
        elif kind == env_spec_lib.MULTI_DISCRETE:
            total.append(distributions.multi_categorical_kl(p, q, head.leaf.num_values))
        else:
            total.append(distributions.bernoulli_kl(p, q))
    return _summed(total)


def to_env(tree: Any, row: jax.Array) -> Any:
    """Action rows [B, D] as the env's tree: leaves [B, *shape] in their dtypes and ranges.

    A bounded Box's elements map linearly from [-1, 1] onto its bounds and are clipped
    to them; an unbounded Box's pass as they are; a discrete leaf's values are shifted
    by its start.
    """
    batch = row.shape[:-1]
    leaves = []
    for head in heads(tree):
        leaf, x = head.leaf, head.elements(row)
        if leaf.kind == env_spec_lib.VECTOR and leaf.low is not None:
            low, high = jnp.asarray(leaf.low), jnp.asarray(leaf.high)
            x = jnp.clip(low + (x + 1.0) * 0.5 * (high - low), low, high)
        elif leaf.num_values:
            x = jnp.round(x).astype(jnp.int32) + jnp.asarray(leaf.start, jnp.int32)
        dtype = jax.dtypes.canonicalize_dtype(leaf.dtype)  # int64 as int32 without x64.
        leaves.append(x.reshape(*batch, *leaf.shape).astype(dtype))
    return jax.tree.unflatten(jax.tree.structure(tree), leaves)

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
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import ActionLeaf
from batchrl.networks import box_actions, distributions


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


@dataclasses.dataclass(frozen=True)
class _Family:
    """One leaf kind's distribution: its functions of (mean, std) or logits, and the leaf.

    Every action row stretch is [..., size]: a `Discrete` leaf's one value sits in a
    stretch of one, which its categorical functions read and write without that axis.
    """

    sample: Callable[[jax.Array, Any, ActionLeaf], jax.Array]
    mode: Callable[[Any, ActionLeaf], jax.Array]
    log_prob: Callable[[Any, jax.Array, ActionLeaf], jax.Array]
    entropy: Callable[[Any, ActionLeaf], jax.Array]
    kl: Callable[[Any, Any, ActionLeaf], jax.Array]


_FAMILIES = {
    env_spec_lib.VECTOR: _Family(
        sample=lambda key, p, leaf: distributions.gaussian_sample(key, *p),
        mode=lambda p, leaf: p[0],
        log_prob=lambda p, x, leaf: distributions.gaussian_log_prob(*p, x),
        entropy=lambda p, leaf: distributions.gaussian_entropy(*p),
        kl=lambda p, q, leaf: distributions.gaussian_kl(*p, *q),
    ),
    env_spec_lib.DISCRETE: _Family(
        sample=lambda key, p, leaf: distributions.categorical_sample(key, p)[..., None],
        mode=lambda p, leaf: distributions.categorical_mode(p)[..., None],
        log_prob=lambda p, x, leaf: distributions.categorical_log_prob(p, x[..., 0]),
        entropy=lambda p, leaf: distributions.categorical_entropy(p),
        kl=lambda p, q, leaf: distributions.categorical_kl(p, q),
    ),
    env_spec_lib.MULTI_DISCRETE: _Family(
        sample=lambda key, p, leaf: distributions.multi_categorical_sample(key, p, leaf.num_values),
        mode=lambda p, leaf: distributions.multi_categorical_mode(p, leaf.num_values),
        log_prob=lambda p, x, leaf: distributions.multi_categorical_log_prob(p, x, leaf.num_values),
        entropy=lambda p, leaf: distributions.multi_categorical_entropy(p, leaf.num_values),
        kl=lambda p, q, leaf: distributions.multi_categorical_kl(p, q, leaf.num_values),
    ),
    env_spec_lib.BINARY: _Family(
        sample=lambda key, p, leaf: distributions.bernoulli_sample(key, p),
        mode=lambda p, leaf: distributions.bernoulli_mode(p),
        log_prob=lambda p, x, leaf: distributions.bernoulli_log_prob(p, x),
        entropy=lambda p, leaf: distributions.bernoulli_entropy(p),
        kl=lambda p, q, leaf: distributions.bernoulli_kl(p, q),
    ),
}


def _family(head: Head) -> _Family:
    return _FAMILIES[head.leaf.kind]


def _summed(parts: list[jax.Array]) -> jax.Array:
    return sum(parts[1:], parts[0])


def _row(parts: list[jax.Array]) -> jax.Array:
    return jnp.concatenate([part.astype(jnp.float32) for part in parts], axis=-1)


def sample(tree: Any, dist: dict, key: jax.Array) -> jax.Array:
    """Action rows [..., D] drawn leaf by leaf, each leaf from its own key."""
    found = heads(tree)
    keys = jax.random.split(key, len(found))
    return _row(
        [_family(h).sample(k, h.parameters(dist), h.leaf) for h, k in zip(found, keys, strict=True)]
    )


def mode(tree: Any, dist: dict) -> jax.Array:
    """The most probable action rows [..., D]: each Box leaf's mean, each other's mode."""
    return _row([_family(h).mode(h.parameters(dist), h.leaf) for h in heads(tree)])


def log_prob(tree: Any, dist: dict, row: jax.Array) -> jax.Array:
    """[...] the sum over the leaves of the log-probability of their elements of `row`."""
    return _summed(
        [_family(h).log_prob(h.parameters(dist), h.elements(row), h.leaf) for h in heads(tree)]
    )


def entropy(tree: Any, dist: dict) -> jax.Array:
    """[...] the sum of the leaves' entropies."""
    return _summed([_family(h).entropy(h.parameters(dist), h.leaf) for h in heads(tree)])


def kl(tree: Any, old: dict, new: dict) -> jax.Array:
    """[...] KL(old || new), the sum of the leaves' KLs."""
    return _summed(
        [_family(h).kl(h.parameters(old), h.parameters(new), h.leaf) for h in heads(tree)]
    )


def to_env(tree: Any, row: jax.Array) -> Any:
    """Action rows [B, D] as the env's tree: leaves [B, *shape] in their dtypes and ranges.

    A Box's elements map onto its bounds and dtype (`box_actions.onto_box`); a discrete
    leaf's values are shifted by its start.
    """
    batch = row.shape[:-1]
    leaves = []
    for head in heads(tree):
        leaf, x = head.leaf, head.elements(row)
        if leaf.kind == env_spec_lib.VECTOR:
            integers = np.dtype(leaf.dtype).kind in "iu"
            x = box_actions.onto_box(x, leaf.low, leaf.high, integers)
        elif leaf.num_values:
            x = jnp.round(x).astype(jnp.int32) + jnp.asarray(leaf.start, jnp.int32)
        dtype = jax.dtypes.canonicalize_dtype(leaf.dtype)  # int64 as int32 without x64.
        leaves.append(x.reshape(*batch, *leaf.shape).astype(dtype))
    return jax.tree.unflatten(jax.tree.structure(tree), leaves)

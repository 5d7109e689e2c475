"""A batch's simulation split over rollout actors by rows and joined again, each actor's own.

A simulation holds per-env rows and a few scalars the rows share: for host envs the
bridge's count of host calls (`bridge.BridgeState.token`), which each actor's envs keep
on their own, their resets falling at other steps. Joined, the whole holds the first
actor's scalars (`rollout_actor.join_rows`); split again, each actor gets its own back,
so that its envs take the state as their newest, while a state they have stepped past
is still refused there. An actor given the first's count was refused at the next phase
that went on from the last one's state (not restarted by an evaluation between them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from batchrl import simulate
from batchrl.training import rollout_actor
from batchrl.training.rollout_actor import join_rows, rows

KEPT = 4  # Joined states whose actors' scalars are kept, of the train and eval envs each.


class SimShares:
    """Splits and joins the simulations of actors holding envs `ranges` ([lo, hi) each)."""

    def __init__(self, ranges: Sequence[tuple[int, int]]):
        self.ranges = list(ranges)
        self._kept: dict[bool, dict[Any, list[Any]]] = {False: {}, True: {}}

    def keep(self, env_states: Sequence[Any], evaluation: bool = False) -> None:
        """Each actor's env state's scalars, found again by those of the first's."""
        kept = self._kept[evaluation]
        kept[_scalars(env_states[0])] = list(env_states)
        while len(kept) > KEPT:
            kept.pop(next(iter(kept)))

    def scatter(self, state: simulate.SimState, evaluation: bool = False) -> list[Any]:
        """Each actor's share of `state`; its episode sums all go to the first."""
        host = rollout_actor.to_host(state)
        parts = [rows(host, lo, hi) for lo, hi in self.ranges]
        own = self._kept[evaluation].get(_scalars(host.env_state))
        if own is not None:  # A state joined here: each actor's scalars its own again.
            parts = [
                part.replace(env_state=jax.tree.map(_scalar_of, part.env_state, mine))
                for part, mine in zip(parts, own, strict=True)
            ]
        return [parts[0], *(simulate.clear_summary(part) for part in parts[1:])]

    def gather(self, parts: Sequence[Any], evaluation: bool = False) -> simulate.SimState:
        """The whole batch's simulation from the actors' shares."""
        self.keep([part.env_state for part in parts], evaluation)
        whole = join_rows(parts)
        whole = whole.replace(
            episodes=sum(part.episodes for part in parts),
            score_sum=sum(part.score_sum for part in parts),
            length_sum=sum(part.length_sum for part in parts),
        )
        return jax.tree.map(jnp.asarray, whole)


def _scalars(tree: Any) -> Any:
    """A key of `tree`'s structure and its scalars' values (random keys left out)."""
    scalars = [leaf for leaf in jax.tree.leaves(tree) if np.ndim(leaf) == 0]
    arrays = [np.asarray(leaf) for leaf in scalars if not rollout_actor.is_key(leaf)]
    values = tuple((str(array.dtype), array.tobytes()) for array in arrays)
    return jax.tree.structure(tree), values


def _scalar_of(joined: Any, own: Any) -> Any:
    """The actor's own value of a scalar; its rows as the joined state holds them."""
    return own if np.ndim(joined) == 0 else joined

"""An Agent's functions with what they return checked as they are traced.

An algorithm author's `perform` that returns (acting, action) and not (acting, action,
extra) failed inside `simulate.step` with "not enough values to unpack (expected 3, got
2)", and a `begin_episode` that forgot its `return` failed in the user's own `perform`
on None. Each is checked once, when the step is traced, and named in one line with
what it must return.
"""

from __future__ import annotations

from typing import Any

import jax

_RETURNS = {
    "perform": (3, "(acting, action, extra)"),
    "experience": (2, "(acting, extra)"),
}


def checked(agent: Any) -> Any:
    """`agent` (a `simulate.Agent`) whose functions raise a one-line TypeError on bad returns."""

    def begin_episode(acting: Any, mask: jax.Array) -> Any:
        return _same_state("begin_episode", acting, agent.begin_episode(acting, mask))

    def perform(acting: Any, obs: Any, key: jax.Array) -> tuple:
        return _tuple("perform", acting, agent.perform(acting, obs, key))

    def experience(acting: Any, transition: Any, extra: Any) -> tuple:
        return _tuple("experience", acting, agent.experience(acting, transition, extra))

    def end_episode(acting: Any, mask: jax.Array) -> Any:
        return _same_state("end_episode", acting, agent.end_episode(acting, mask))

    return agent._replace(
        begin_episode=begin_episode,
        perform=perform,
        experience=experience,
        end_episode=end_episode,
    )


def _tuple(name: str, acting: Any, result: Any) -> tuple:
    """`result` if a tuple of the right length whose first item is `acting`'s structure.

    The first item is checked too: an acting state that is itself a pair, returned alone
    by `experience`, or an action returned first, is a tuple of the right length.
    """
    count, shape = _RETURNS[name]
    right = isinstance(result, tuple) and len(result) == count
    if right and _same(acting, result[0]):
        return result
    got = f"{_said(result[0])} first" if right else _said(result)
    raise TypeError(
        f"Agent.{name} must return {shape}, a tuple of {count} whose acting is the acting "
        f"state it was given ({_said(acting)}); got {got}"
    )


def _same_state(name: str, acting: Any, result: Any) -> Any:
    if _same(acting, result):
        return result
    raise TypeError(
        f"Agent.{name} must return the acting state it was given ({_said(acting)}), of the "
        f"same structure; got {_said(result)}"
    )


def _same(acting: Any, result: Any) -> bool:
    return jax.tree.structure(result) == jax.tree.structure(acting)


def _said(value: Any) -> str:
    """A value as a message names it: None, a tuple of 2, an array, a Counts."""
    if value is None:
        return "None (a missing return?)"
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return f"a tuple of {len(value)}"
    if isinstance(value, jax.Array):
        return "an array"
    return f"a {type(value).__name__}"

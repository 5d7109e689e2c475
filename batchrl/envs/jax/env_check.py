"""A user's JAX-native env checked against its own spec before a run compiles it.

As Gymnasium's env checker does for its envs: `reset` and `step` are traced once
(`jax.eval_shape`, nothing runs) and what they return is held against `env_spec`, so a
wrong shape, dtype or return is one line naming the function and the value, not a
`lax.scan` carry error deep in the compiled run.
"""

from __future__ import annotations

import numbers
import os
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib

from batchrl import env_spec as env_spec_lib
from batchrl.envs.jax import jax_env

_JAX_FOLDERS = tuple(os.path.dirname(module.__file__) + os.sep for module in (jax, jaxlib))


def check(env: jax_env.Env) -> None:
    """A one-line ValueError for the first thing `env`'s reset or step returns amiss."""
    name = type(getattr(env, "env", env)).__name__
    whole = isinstance(env.max_length, numbers.Integral) and not isinstance(env.max_length, bool)
    if not whole or env.max_length < 1:  # numpy's ints too, as Gymnasium's TimeLimit takes.
        got = env.max_length
        raise ValueError(f"env {name}'s max_length must be an int of at least 1, got {got!r}")
    spec = env.env_spec
    if not isinstance(spec, env_spec_lib.EnvSpec):
        raise ValueError(
            f"env {name}'s env_spec is a {type(spec).__name__}, not an EnvSpec: make one from "
            "its Gymnasium spaces, batchrl.envs.spaces.env_spec(observation_space, action_space)"
        )
    reset = _traced(f"env {name}'s reset", "", env.reset, jax.random.key(0))
    if not (isinstance(reset, tuple) and len(reset) == 2):
        raise ValueError(f"env {name}'s reset returns (env_state, obs), got {_said(reset)}")
    state, obs = reset
    _check_obs(f"env {name}'s reset", obs, spec.observation)
    action = _action(spec)
    # What the step was given: a step that read another action kind fails as a symptom.
    given = f" (given action {_said(jax.eval_shape(lambda: action))}, as its env_spec says)"
    out = _traced(f"env {name}'s step", given, env.step, state, action)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], jax_env.TimeStep)):
        raise ValueError(
            f"env {name}'s step returns (env_state, jax_env.TimeStep), got {_said(out)}{given}"
        )
    new_state, step = out
    _check_obs(f"env {name}'s step", step.obs, spec.observation, given)
    for field, kinds in (("reward", "iuf"), ("terminated", "b"), ("truncated", "b")):
        value = getattr(step, field)
        dtype = getattr(value, "dtype", None)
        if getattr(value, "shape", None) != () or getattr(dtype, "kind", None) not in kinds:
            wanted = "a number" if field == "reward" else "a bool"
            raise ValueError(
                f"env {name}'s step returns {field} {_said(value)}: expected {wanted} of "
                f"shape () (one env's){given}"
            )
    if jax.tree.structure(new_state) != jax.tree.structure(state) or any(
        (a.shape, a.dtype) != (b.shape, b.dtype)
        for a, b in zip(jax.tree.leaves(new_state), jax.tree.leaves(state), strict=True)
    ):
        raise ValueError(
            f"env {name}'s step returns an env_state unlike reset's: {_said(new_state)} "
            f"after {_said(state)}; a run steps it in a loop, so it keeps its shapes and "
            f"dtypes{given}"
        )


def _traced(where: str, given: str, function: Any, *args: Any) -> Any:
    """`jax.eval_shape(function, *args)`; what it raises as one line, where it rose.

    A step that cannot be traced (a Python `if` on a traced value, a NumPy call on one)
    ran to JAX's error, a screen of traceback through batchrl in the train command.
    """
    try:
        return jax.eval_shape(function, *args)
    except Exception as error:
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if not frame.filename.startswith(_JAX_FOLDERS)  # The env's own line, not JAX's.
        ]
        at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"{where} raised {type(error).__name__} as it was traced{at}: {first}{given}; a "
            "JAX-native env's reset and step are pure JAX functions (jax.jit compiles them)"
        ) from error


def _check_obs(where: str, obs: Any, spec: Any, given: str = "") -> None:
    """A ValueError when `obs` is not a tree of arrays as `spec`'s leaves describe."""
    expected = env_spec_lib.map_tree(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, jax.dtypes.canonicalize_dtype(leaf.dtype)),
        spec,
    )
    if jax.tree.structure(obs) != jax.tree.structure(expected):
        said = f"{where} returns obs {_said(obs)}: its env_spec says {_said(expected)}{given}"
        raise ValueError(said)
    for (path, got), want in zip(
        jax.tree_util.tree_leaves_with_path(obs), jax.tree.leaves(expected), strict=True
    ):
        if (got.shape, got.dtype) != (want.shape, want.dtype):
            at = f"obs{jax.tree_util.keystr(path)}"
            said = f"{where} returns {at} {_said(got)}: its env_spec says {_said(want)}{given}"
            raise ValueError(said)


def _action(spec: env_spec_lib.EnvSpec) -> Any:
    """An action of one env as a run passes it: a tree's leaves, ints, or floats."""
    if spec.action is not None:
        return env_spec_lib.map_tree(
            lambda leaf: jnp.zeros(leaf.shape, jax.dtypes.canonicalize_dtype(leaf.dtype)),
            spec.action,
        )
    return jnp.zeros(spec.action_shape, jnp.int32 if spec.discrete else jnp.float32)


def _said(value: Any) -> str:
    """A traced value in a few words: `float32[2]`, a tree of them, or its type."""
    if isinstance(value, jax.ShapeDtypeStruct):
        return f"{value.dtype}{list(value.shape)}"
    leaves, tree = jax.tree.flatten(value)
    if not leaves:
        return repr(value) if value is None else type(value).__name__
    if tree.num_leaves == 1 and tree.num_nodes == 1:
        return type(value).__name__
    return str(jax.tree.unflatten(tree, [_said(leaf) for leaf in leaves])).replace("'", "")

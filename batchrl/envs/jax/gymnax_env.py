"""gymnax's envs as JAX-native envs of simulate: any env gymnax registers, by its name.

`make("Acrobot-v1")` wraps gymnax's own env and default parameters (`make("Acrobot-v1",
max_steps_in_episode=100)` others), `wrap(env)` a gymnax `Environment` of your own. A
step is gymnax's `step_env` (no reset inside: simulate resets finished envs itself);
the episode's time limit, gymnax's `max_steps_in_episode`, is applied by
`jax_env.TimeLimit`, so a time limit is `truncated` (bootstrapped) and only gymnax's
own terminal states are `terminated`. The step's key travels in the state. Needs
`pip install -e '.[gymnax]'`.

The spec's observation tree follows what `reset_env` returns, leaf by leaf (shape and
dtype), keeping each leaf's kind from gymnax's space; some envs' spaces say otherwise.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl import extras
from batchrl.env_spec import EnvSpec
from batchrl.envs import spaces
from batchrl.envs.jax import jax_env


@flax.struct.dataclass
class GymnaxState:
    """A gymnax env's state and the key its next step draws from."""

    env_state: Any
    key: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class GymnaxEnv:
    """One gymnax env with fixed parameters, behind the `jax_env.Env` protocol.

    Two are equal when they are the same env as values: gymnax's env class, its settings
    and its parameters (arrays by their contents), so equal runs of one share their
    programs (`training.reuse`), as runs of the classic envs do.
    """

    env: Any  # gymnax.environments.environment.Environment
    params: Any  # Its EnvParams.
    env_spec: EnvSpec
    max_length: int

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GymnaxEnv) and self._value() == other._value()

    def __hash__(self) -> int:
        return hash(self._value())

    def _value(self) -> tuple:
        settings = tuple(sorted((name, _as_value(v)) for name, v in vars(self.env).items()))
        leaves, tree = jax.tree.flatten(self.params)
        params = tuple(_as_value(leaf) for leaf in leaves)
        return (type(self.env), settings, tree, params, self.env_spec, self.max_length)

    def reset(self, key: jax.Array) -> tuple[GymnaxState, Any]:
        """Starts an episode with gymnax's `reset_env`. Returns (state, obs)."""
        key, reset_key = jax.random.split(key)
        obs, env_state = self.env.reset_env(reset_key, self.params)
        return GymnaxState(env_state, key), obs

    def step(self, env_state: GymnaxState, action: jax.Array) -> tuple[GymnaxState, Any]:
        """One step of gymnax's `step_env`: no reset; `terminated` only at a terminal state."""
        key, step_key = jax.random.split(env_state.key)
        obs, state, reward, terminated, _ = self.env.step_env(
            step_key, env_state.env_state, action, self.params
        )
        time_step = jax_env.TimeStep(
            obs=obs,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),
            truncated=jnp.zeros((), bool),
        )
        return GymnaxState(state, key), time_step


def _as_value(value: Any) -> Any:
    """`value` as what compares it by its contents; an object of another kind as itself.

    Arrays by dtype, shape and bytes, tuples item by item, plain Python values by type
    and value (so 1 and True differ).
    """
    if isinstance(value, (jax.Array, np.ndarray)):
        array = np.asarray(value)
        return ("array", array.dtype.str, array.shape, array.tobytes())
    if isinstance(value, tuple):
        return ("tuple", tuple(_as_value(item) for item in value))
    if isinstance(value, (bool, int, float, str)) or value is None:
        return (type(value).__name__, value)
    return ("object", value)


def names() -> list[str]:
    """The envs gymnax registers."""
    return list(_gymnax().registered_envs)


def registers(name: str) -> bool:
    """Whether gymnax is installed and registers an env `name` (MinAtar's, say)."""
    try:
        return name in names()
    except ImportError:
        return False


def make(name: str, **params: Any) -> jax_env.TimeLimit:
    """The gymnax env `name` with gymnax's default parameters but `params`, and its time limit.

    Raises:
        ValueError: gymnax has no env `name` (the message lists those it has), or its
            parameters no field of a name in `params`.
        ImportError: gymnax is not installed, or a module it imports is missing (named).
            Or the env reads or downloads data it cannot here (MNISTBandit's, offline).
    """
    if name not in names():
        close = difflib.get_close_matches(name, names(), n=1)
        close = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown gymnax env {name!r}{close}; gymnax has: {', '.join(names())}")
    try:
        env, defaults = _gymnax().make(name)
    except OSError as error:  # A URLError's text holds only its reason.
        raise ValueError(f"gymnax env {name!r} cannot be made here: {error!r}") from error
    return wrap(env, with_params(name, defaults, params), name)


def wrap(env: Any, params: Any = None, name: str | None = None) -> jax_env.TimeLimit:
    """A gymnax `Environment` (one of your own, say) as a JAX-native env, with its time limit.

    The limit is its parameters' `max_steps_in_episode`; `params`: its EnvParams,
    `env.default_params` where None; `name`: the env's in error messages.
    """
    params = env.default_params if params is None else params
    named = f"'{name or type(env).__name__}' (gymnax)"
    to_gym = _gymnax().environments.spaces.gymnax_space_to_gym_space
    observation_space = to_gym(env.observation_space(params))
    action_space = to_gym(env.action_space(params))
    env_spec = spaces.env_spec(observation_space, action_space, env_name=named)
    obs = jax.eval_shape(env.reset_env, jax.random.key(0), params)[0]
    env_spec = dataclasses.replace(env_spec, observation=returned(env_spec.observation, obs))
    limit = int(params.max_steps_in_episode)
    return jax_env.TimeLimit(GymnaxEnv(env, params, env_spec, limit))


def with_params(name: str, params: Any, changes: dict[str, Any]) -> Any:
    """`params` (an EnvParams) with `changes`, each in the type its field holds now."""
    fields = [field.name for field in dataclasses.fields(params)]
    unknown = [key for key in changes if key not in fields]
    if unknown:
        raise ValueError(
            f"gymnax env {name!r} has no parameter {unknown[0]!r}; its parameters: "
            f"{', '.join(fields)}"
        )

    def typed(key: str, value: Any) -> Any:
        now = getattr(params, key)  # An array stays one of its dtype; a Python number, one.
        kind = np.asarray(now).dtype
        # A number's: cast unchecked, 1.5 steps an episode trained episodes of 1, "x" a
        # traceback. A flag's or a list's (Acrobot's torques) are cast as before.
        if np.ndim(now) == 0 and np.issubdtype(kind, np.number):  # bool is no np.number.
            whole = np.issubdtype(kind, np.integer)
            real = np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.number)
            if not real or not np.isfinite(value) or (whole and value != int(value)):
                what = "a whole number" if whole else "a finite number"
                raise ValueError(f"gymnax env {name!r} takes {key} as {what}, got {value!r}")
        if key == "max_steps_in_episode" and value < 1:
            raise ValueError(f"gymnax env {name!r} takes {key} of 1 or more, got {value!r}")
        return jnp.asarray(value, now.dtype) if hasattr(now, "dtype") else type(now)(value)

    return params.replace(**{key: typed(key, value) for key, value in changes.items()})


def is_gymnax(env: Any) -> bool:
    """Whether `env` is a gymnax `Environment` (its `step_env` and `default_params`)."""
    return not isinstance(env, type) and all(
        hasattr(env, name) for name in ("step_env", "reset_env", "default_params")
    )


def returned(observation: Any, obs: Any) -> Any:
    """The observation tree of the space, with each leaf's shape and dtype as `obs` has them.

    `obs` is what reset returns (a tree of `jax.ShapeDtypeStruct`), which is what simulate
    sees. A leaf keeps the space's kind where the shapes agree; a leaf whose shape differs,
    or every leaf when the trees differ in structure, becomes a vector leaf.
    """

    def vector(returned: jax.ShapeDtypeStruct) -> env_spec_lib.ObsLeaf:
        return env_spec_lib.vector(tuple(returned.shape), returned.dtype.name)

    if jax.tree.structure(observation) != jax.tree.structure(obs):
        return jax.tree.map(vector, obs)

    def leaf(space: env_spec_lib.ObsLeaf, returned: jax.ShapeDtypeStruct) -> Any:
        if space.shape != tuple(returned.shape):
            return vector(returned)
        return dataclasses.replace(space, dtype=returned.dtype.name)

    return env_spec_lib.map_tree(leaf, observation, obs)


def _gymnax() -> Any:
    """gymnax, imported when an env is first asked for.

    Its import (seaborn and scipy with it) takes seconds that runs on other envs need not pay.
    """
    try:
        import gymnax
        import gymnax.environments.spaces
    except ImportError as error:
        missing = "is not installed" if error.name == "gymnax" else f"failed to import ({error})"
        raise ImportError(
            f"backend 'gymnax' needs gymnax, which {missing}: {extras.pip_install('gymnax')}"
        ) from None
    return gymnax

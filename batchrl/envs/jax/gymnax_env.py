"""gymnax's envs as JAX-native envs of simulate: any env gymnax registers, by its name.

`make("Acrobot-v1")` wraps gymnax's own env and default parameters. A step is gymnax's
`step_env` (no reset inside: simulate resets finished envs itself); the episode's time
limit, gymnax's `max_steps_in_episode`, is applied by `jax_env.TimeLimit`, so a
time limit is `truncated` (bootstrapped) and only gymnax's own terminal states are
`terminated`. The step's key travels in the state. Needs `pip install -e '.[gymnax]'`.

The spec's observation tree follows what `reset_env` returns, leaf by leaf (shape and
dtype), keeping each leaf's kind from gymnax's space; some envs' spaces say otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs import spaces
from batchrl.envs.jax import jax_env


@flax.struct.dataclass
class GymnaxState:
    """A gymnax env's state and the key its next step draws from."""

    env_state: Any
    key: jax.Array


@dataclasses.dataclass(frozen=True)
class GymnaxEnv:
    """One gymnax env with fixed parameters, behind the `jax_env.Env` protocol."""

    env: Any  # gymnax.environments.environment.Environment
    params: Any  # Its EnvParams.
    env_spec: EnvSpec
    max_length: int

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


def names() -> list[str]:
    """The envs gymnax registers."""
    return list(_gymnax().registered_envs)


def make(name: str) -> jax_env.TimeLimit:
    """The gymnax env `name` with its default parameters and time limit.

    Raises:
        ValueError: gymnax has no env `name` (the message lists those it has).
        ImportError: gymnax is not installed, or a module it imports is missing (named).
    """
    if name not in names():
        raise ValueError(f"unknown gymnax env {name!r}; gymnax has: {', '.join(names())}")
    env, params = _gymnax().make(name)
    to_gym = _gymnax().environments.spaces.gymnax_space_to_gym_space
    observation_space = to_gym(env.observation_space(params))
    action_space = to_gym(env.action_space(params))
    env_spec = spaces.env_spec(observation_space, action_space, env_name=f"'{name}' (gymnax)")
    obs = jax.eval_shape(env.reset_env, jax.random.key(0), params)[0]
    env_spec = dataclasses.replace(env_spec, observation=returned(env_spec.observation, obs))
    limit = int(params.max_steps_in_episode)
    return jax_env.TimeLimit(GymnaxEnv(env, params, env_spec, limit))


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
            f"backend 'gymnax' needs gymnax, which {missing}: pip install -e '.[gymnax]'"
        ) from None
    return gymnax

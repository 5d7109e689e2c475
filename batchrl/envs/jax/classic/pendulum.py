"""Pendulum-v1 in JAX: Gymnasium's swing-up pendulum as pure reset and step functions.

Dynamics, observation, reward and reset distribution follow Gymnasium's
`classic_control/pendulum.py`: semi-implicit Euler with dt 0.05, speed clipped to
[-8, 8], torque clipped to [-2, 2] inside `step`, reward
-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 torque^2) of the state before the
step, and a start state uniform in [-pi, pi] x [-1, 1]. The episode never ends by
itself; `jax_env.TimeLimit` adds the registered limit of 200 steps.

One deliberate difference, invisible in observations and rewards: the state keeps theta
wrapped to [-pi, pi), where Gymnasium lets it grow without bound. Observations and
rewards depend on theta only through cos, sin and angle_normalize, which are periodic,
and wrapping keeps float32 precise however long the episode.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import flax.struct
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env

MAX_SPEED = 8.0
OBS_HIGH = np.array([1.0, 1.0, MAX_SPEED], np.float32)
MAX_TORQUE = 2.0
DT = 0.05
MASS = 1.0
LENGTH = 1.0
INIT_THETA = np.pi
INIT_THETA_DOT = 1.0


@flax.struct.dataclass
class PendulumState:
    """State of one pendulum, float32 unless built by `state_from_gym` with another dtype.

    Attributes:
        theta: [] angle in [-pi, pi), 0 upright, counter-clockwise positive.
        theta_dot: [] angular velocity in [-8, 8].
    """

    theta: jax.Array
    theta_dot: jax.Array


@dataclasses.dataclass(frozen=True)
class Pendulum:
    """Gymnasium's Pendulum-v1; `g` is gravity, as in `gym.make("Pendulum-v1", g=...)`."""

    g: float = 10.0

    env_spec: ClassVar[EnvSpec] = EnvSpec(
        observation=env_spec_lib.vector((3,)),
        discrete=False,
        action_shape=(1,),
        action_low=(-MAX_TORQUE,),
        action_high=(MAX_TORQUE,),
        spaces=(  # Gymnasium's Pendulum-v1's, which a loaded policy tells.
            gym.spaces.Box(-OBS_HIGH, OBS_HIGH, (3,), np.float32),
            gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, (1,), np.float32),
        ),
    )
    max_length: ClassVar[int] = 200

    def reset(self, key: jax.Array) -> tuple[PendulumState, jax.Array]:
        """Samples theta ~ U[-pi, pi] and theta_dot ~ U[-1, 1]. Returns (state, obs [3])."""
        high = jnp.array([INIT_THETA, INIT_THETA_DOT], jnp.float32)
        theta, theta_dot = jax.random.uniform(key, (2,), jnp.float32, -high, high)
        state = PendulumState(theta=angle_normalize(theta), theta_dot=theta_dot)
        return state, observe(state)

    def step(
        self, env_state: PendulumState, action: jax.Array
    ) -> tuple[PendulumState, jax_env.TimeStep]:
        """Applies torque action [1], clipped to [-2, 2]. Returns (state, TimeStep)."""
        if action.shape != (1,):
            raise ValueError(f"action has shape {action.shape}, expected (1,)")
        theta, theta_dot = env_state.theta, env_state.theta_dot
        # The torque terms stay in the action's dtype, as in Gymnasium, where NumPy keeps
        # them float32 for a float32 action; this matters only for a float64 state.
        action = action.astype(jnp.result_type(action, jnp.float32))
        torque = jnp.clip(action, -MAX_TORQUE, MAX_TORQUE)[0]
        torque_cost = 0.001 * torque**2
        torque_acceleration = 3.0 / (MASS * LENGTH**2) * torque
        cost = angle_normalize(theta) ** 2 + 0.1 * theta_dot**2 + torque_cost
        acceleration = 3 * self.g / (2 * LENGTH) * jnp.sin(theta) + torque_acceleration
        theta_dot = jnp.clip(theta_dot + acceleration * DT, -MAX_SPEED, MAX_SPEED)
        theta = angle_normalize(theta + theta_dot * DT)
        state = PendulumState(theta=theta, theta_dot=theta_dot)
        time_step = jax_env.TimeStep(
            obs=observe(state),
            reward=-cost,
            terminated=jnp.zeros((), bool),
            truncated=jnp.zeros((), bool),
        )
        return state, time_step


def observe(state: PendulumState) -> jax.Array:
    """The observation [cos(theta), sin(theta), theta_dot], float32 [3]."""
    return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot])


def angle_normalize(theta: jax.Array) -> jax.Array:
    """Wraps an angle to [-pi, pi), as Gymnasium's `angle_normalize`."""
    return (theta + jnp.pi) % (2 * jnp.pi) - jnp.pi


def state_from_gym(gym_state: np.ndarray, dtype: jnp.dtype = jnp.float32) -> PendulumState:
    """The JAX state equal to Gymnasium `PendulumEnv.state`s, gym_state [..., 2].

    Takes [theta, theta_dot], or a stack of them to build a batched state. Theta is
    wrapped in float64 before the cast to float32, so Gymnasium's unbounded angle loses
    no precision. `step` computes in the state's dtype: float64 (with x64 enabled) follows
    Gymnasium's own arithmetic.
    """
    gym_state = np.asarray(gym_state, np.float64)
    theta, theta_dot = gym_state[..., 0], gym_state[..., 1]
    theta = (theta + np.pi) % (2 * np.pi) - np.pi
    return PendulumState(theta=jnp.asarray(theta, dtype), theta_dot=jnp.asarray(theta_dot, dtype))

"""CartPole-v1 in JAX: Gymnasium's cart and pole as pure reset and step functions.

Dynamics, observation, reward, termination and reset distribution follow Gymnasium's
`classic_control/cartpole.py` with its defaults: explicit Euler with tau 0.02, a force
of +10 for action 1 and -10 for action 0, reward 1 for every step including the one
that terminates, termination once |x| > 2.4 or |theta| > 12 degrees, and a start state
uniform in [-0.05, 0.05]^4. `jax_env.TimeLimit` adds the registered limit of 500.
Stepping past termination is undefined, as in Gymnasium (which then returns reward 0
and warns); here it keeps returning 1.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import flax.struct
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
OBS_HIGH = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], np.float32)
INIT_BOUND = 0.05


@flax.struct.dataclass
class CartPoleState:
    """State of one cart-pole, all [] float32 unless built by `state_from_gym` with another dtype.

    Attributes:
        x: Cart position.
        x_dot: Cart velocity.
        theta: Pole angle from upright, in radians.
        theta_dot: Pole angular velocity.
    """

    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array


@dataclasses.dataclass(frozen=True)
class CartPole:
    """Gymnasium's CartPole-v1 with its default reward (not the Sutton-Barto variant)."""

    env_spec: ClassVar[EnvSpec] = EnvSpec(
        env_spec_lib.vector((4,)),
        discrete=True,
        num_actions=2,
        action_start=(0,),
        spaces=(  # Gymnasium's CartPole-v1's, which a loaded policy tells.
            gym.spaces.Box(-OBS_HIGH, OBS_HIGH, (4,), np.float32),
            gym.spaces.Discrete(2),
        ),
    )
    max_length: ClassVar[int] = 500

    def reset(self, key: jax.Array) -> tuple[CartPoleState, jax.Array]:
        """Samples every state variable from U[-0.05, 0.05]. Returns (state, obs [4])."""
        x, x_dot, theta, theta_dot = jax.random.uniform(
            key, (4,), jnp.float32, -INIT_BOUND, INIT_BOUND
        )
        state = CartPoleState(x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot)
        return state, observe(state)

    def step(
        self, env_state: CartPoleState, action: jax.Array
    ) -> tuple[CartPoleState, jax_env.TimeStep]:
        """Pushes right for action 1, left otherwise (action: [] int). Returns (state, TimeStep)."""
        if action.shape != ():
            raise ValueError(f"action has shape {action.shape}, expected ()")
        s = env_state
        force = jnp.where(action == 1, FORCE, -FORCE).astype(s.x.dtype)
        cos_theta, sin_theta = jnp.cos(s.theta), jnp.sin(s.theta)
        temp = (force + POLE_MASS_LENGTH * s.theta_dot**2 * sin_theta) / TOTAL_MASS
        theta_acc = (GRAVITY * sin_theta - cos_theta * temp) / (
            HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos_theta**2 / TOTAL_MASS)
        )
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS
        state = CartPoleState(
            x=s.x + TAU * s.x_dot,
            x_dot=s.x_dot + TAU * x_acc,
            theta=s.theta + TAU * s.theta_dot,
            theta_dot=s.theta_dot + TAU * theta_acc,
        )
        terminated = (jnp.abs(state.x) > X_THRESHOLD) | (jnp.abs(state.theta) > THETA_THRESHOLD)
        time_step = jax_env.TimeStep(
            obs=observe(state),
            reward=jnp.ones((), s.x.dtype),
            terminated=terminated,
            truncated=jnp.zeros((), bool),
        )
        return state, time_step


def observe(state: CartPoleState) -> jax.Array:
    """The observation [x, x_dot, theta, theta_dot], float32 [4]."""
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])


def state_from_gym(gym_state: np.ndarray, dtype: jnp.dtype = jnp.float32) -> CartPoleState:
    """The JAX state equal to Gymnasium `CartPoleEnv.state`s, gym_state [..., 4].

    Takes [x, x_dot, theta, theta_dot], or a stack of them to build a batched state.
    `step` computes in the state's dtype: float64 (with x64 enabled) follows Gymnasium's
    own arithmetic.
    """
    gym_state = np.asarray(gym_state)
    x, x_dot, theta, theta_dot = (jnp.asarray(gym_state[..., i], dtype) for i in range(4))
    return CartPoleState(x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot)

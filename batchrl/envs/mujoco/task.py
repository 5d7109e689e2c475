"""What every batched MuJoCo task is made of: the batch's arrays and a `Task`'s rules.

A task computes observations, rewards, terminations and infos with the same NumPy
operations Gymnasium applies to one env, over rows of the batch, reading its settings
from a Gymnasium env built with the user's keywords, so they mean what they mean there.
The helpers here are the pieces several tasks share.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import mujoco
import numpy as np


class Lazy:
    """An info column computed when the step's infos are first read: most steps' never are."""

    def __init__(self, compute: Any):
        self.compute = compute


Infos = dict[str, "np.ndarray | Lazy"]


def resolved(infos: Infos) -> dict[str, np.ndarray]:
    """The columns with every `Lazy` one computed."""
    return {key: v.compute() if isinstance(v, Lazy) else v for key, v in infos.items()}


@dataclasses.dataclass(frozen=True)
class PhysicsState:
    """The batch's arrays a task reads: state fields and the derived fields of the last step."""

    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray
    xpos: np.ndarray
    xipos: np.ndarray
    cinert: np.ndarray
    cvel: np.ndarray
    qfrc_actuator: np.ndarray
    ten_length: np.ndarray
    ten_velocity: np.ndarray
    site_xpos: np.ndarray
    qfrc_constraint: np.ndarray
    cfrc_ext: np.ndarray  # Computed by the group after each step when the task needs it.


class Task:
    """One task's rules: initial states, observation, reward, termination, infos."""

    contact_forces: ClassVar[bool] = False  # Whether the task reads cfrc_ext.

    def __init__(self, env: Any):
        self.model: mujoco.MjModel = env.model
        self.dt: float = env.dt
        self.init_qpos: np.ndarray = env.init_qpos.copy()
        self.init_qvel: np.ndarray = env.init_qvel.copy()
        self.env = env

    def initial_state(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The qpos and qvel of one env's first state, drawn as Gymnasium draws them."""
        raise NotImplementedError

    def position(self, state: PhysicsState) -> np.ndarray:
        """What the reward's velocity is measured on, read before a step; a copy.

        Nothing, for a task whose reward needs no position from before the step.
        """
        return np.empty(len(state.qpos))

    def observe(self, state: PhysicsState) -> np.ndarray:
        """Observations [n, obs_dim]."""
        raise NotImplementedError

    def outcome(
        self, state: PhysicsState, before: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Infos]:
        """Reward [n], terminated [n] and the step's infos after a step from `before`."""
        raise NotImplementedError

    def reset_infos(self, state: PhysicsState) -> Infos:
        """The infos `reset` returns."""
        return {}


def uniform_state(task: Task, rng: np.random.Generator, normal_qvel: bool) -> tuple:
    """The initial qpos and qvel plus uniform noise (normal noise for qvel, if asked)."""
    scale = task.env._reset_noise_scale
    qpos = task.init_qpos + rng.uniform(low=-scale, high=scale, size=task.model.nq)
    if normal_qvel:
        qvel = task.init_qvel + scale * rng.standard_normal(task.model.nv)
    else:
        qvel = task.init_qvel + rng.uniform(low=-scale, high=scale, size=task.model.nv)
    return qpos, qvel


def observed_qpos(task: Task, state: PhysicsState, excluded: int) -> np.ndarray:
    """The positions a locomotion task observes: qpos without its first `excluded`.

    Those are x, or x and y; they stay when the env was made with
    exclude_current_positions_from_observation=False.
    """
    if task.env._exclude_current_positions_from_observation:
        return state.qpos[:, excluded:]
    return state.qpos


def control_cost(weight: float, action: np.ndarray) -> np.ndarray:
    """Each row's weighted sum of squared actions, in the actions' dtype, as Gymnasium's."""
    return weight * np.sum(np.square(action), axis=1)


def norm(xy: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm, as `np.linalg.norm` computes it for one row.

    Row by row: a vectorised square root of summed squares rounds otherwise.
    """
    return np.array([np.linalg.norm(row, ord=2) for row in xy])


def distance_from_origin(state: PhysicsState) -> Lazy:
    """Each env's distance from the origin in x and y, computed when infos are read."""
    xy = state.qpos[:, :2].copy()
    return Lazy(lambda: norm(xy))


def xy_infos(state: PhysicsState) -> Infos:
    """The x and y positions the tasks that move in a plane report."""
    return {
        "x_position": state.qpos[:, 0].copy(),
        "y_position": state.qpos[:, 1].copy(),
    }

"""Gymnasium's v5 MuJoCo tasks, computed for a whole batch of simulations at once.

Each task reads its settings from a Gymnasium env built with the user's keywords
(`ctrl_cost_weight`, `reset_noise_scale`, ...), so the constructor keywords mean what
they mean in Gymnasium, and computes observations, rewards, terminations and infos with
the same NumPy operations Gymnasium applies to one env, over rows of the batch. The
tests compare every quantity with Gymnasium's own envs, step for step.

A task sees the batch through `State`: the bound `mujoco.batch` arrays, [n, ...].
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
class State:
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

    def position(self, state: State) -> np.ndarray:
        """What the reward's velocity is measured on, read before a step; a copy."""
        raise NotImplementedError

    def observe(self, state: State) -> np.ndarray:
        """Observations [n, obs_dim]."""
        raise NotImplementedError

    def outcome(
        self, state: State, before: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Infos]:
        """Reward [n], terminated [n] and the step's infos after a step from `before`."""
        raise NotImplementedError

    def reset_infos(self, state: State) -> Infos:
        """The infos `reset` returns."""
        return {}


def _uniform_state(task: Task, rng: np.random.Generator, normal_qvel: bool) -> tuple:
    scale = task.env._reset_noise_scale
    qpos = task.init_qpos + rng.uniform(low=-scale, high=scale, size=task.model.nq)
    if normal_qvel:
        qvel = task.init_qvel + scale * rng.standard_normal(task.model.nv)
    else:
        qvel = task.init_qvel + rng.uniform(low=-scale, high=scale, size=task.model.nv)
    return qpos, qvel


def _control_cost(weight: float, action: np.ndarray) -> np.ndarray:
    return weight * np.sum(np.square(action), axis=1)


def _norm(xy: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm, as `np.linalg.norm` computes it for one row.

    Row by row: a vectorised square root of summed squares rounds otherwise.
    """
    return np.array([np.linalg.norm(row, ord=2) for row in xy])


def _distance_from_origin(state: State) -> Lazy:
    xy = state.qpos[:, :2].copy()
    return Lazy(lambda: _norm(xy))


class _Planar(Task):
    """HalfCheetah, Hopper and Walker2d: x velocity from qpos[0], qpos[0] left out of obs.

    Hopper and Walker2d also pay for staying healthy and end when they are not.
    """

    normal_qvel: ClassVar[bool] = False
    clip_qvel: ClassVar[bool] = True

    def initial_state(self, rng):
        return _uniform_state(self, rng, self.normal_qvel)

    def position(self, state):
        return state.qpos[:, 0].copy()

    def observe(self, state):
        position = state.qpos
        velocity = np.clip(state.qvel, -10, 10) if self.clip_qvel else state.qvel
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 1:]
        return np.concatenate((position, velocity), axis=1)

    def healthy(self, state: State) -> np.ndarray | None:
        """Whether each env is healthy, or None for a task without health."""
        raise NotImplementedError

    def outcome(self, state, before, action):
        env = self.env
        x_velocity = (state.qpos[:, 0] - before) / self.dt
        forward = env._forward_reward_weight * x_velocity
        ctrl_cost = _control_cost(env._ctrl_cost_weight, action)
        rewards = {"reward_forward": forward, "reward_ctrl": -ctrl_cost}
        healthy = self.healthy(state)
        if healthy is None:
            reward = forward - ctrl_cost
            terminated = np.zeros(len(before), bool)
        else:
            survive = healthy * env._healthy_reward
            reward = forward + survive - ctrl_cost
            terminated = ~healthy & env._terminate_when_unhealthy
            rewards["reward_survive"] = survive
        infos = {**self.reset_infos(state), "x_velocity": x_velocity, **rewards}
        return reward, terminated, infos

    def reset_infos(self, state):
        infos = {"x_position": state.qpos[:, 0].copy()}
        if self.healthy(state) is not None:
            infos["z_distance_from_origin"] = state.qpos[:, 1] - self.init_qpos[1]
        return infos


class HalfCheetah(_Planar):
    """Runs forward; never ends before its time limit."""

    normal_qvel = True
    clip_qvel = False

    def healthy(self, state):
        return None


class Hopper(_Planar):
    """Hops forward; ends when it falls, tilts, or any joint state leaves its range."""

    def healthy(self, state):
        env = self.env
        z, angle = state.qpos[:, 1], state.qpos[:, 2]
        rest = np.concatenate((state.qpos, state.qvel), axis=1)[:, 2:]
        min_state, max_state = env._healthy_state_range
        min_z, max_z = env._healthy_z_range
        min_angle, max_angle = env._healthy_angle_range
        healthy_state = np.all((min_state < rest) & (rest < max_state), axis=1)
        return healthy_state & (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)


class Walker2d(_Planar):
    """Walks forward; ends when its torso falls or tilts too far."""

    def healthy(self, state):
        env = self.env
        z, angle = state.qpos[:, 1], state.qpos[:, 2]
        min_z, max_z = env._healthy_z_range
        min_angle, max_angle = env._healthy_angle_range
        return (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)


def _xy_infos(state: State) -> Infos:
    return {
        "x_position": state.qpos[:, 0].copy(),
        "y_position": state.qpos[:, 1].copy(),
    }


class Ant(Task):
    """Walks forward on four legs; pays for contact forces, which it also observes."""

    contact_forces = True

    def __init__(self, env):
        super().__init__(env)
        self.body = self.model.body(env._main_body).id

    def initial_state(self, rng):
        return _uniform_state(self, rng, normal_qvel=True)

    def position(self, state):
        return state.xpos[:, self.body, :2].copy()

    def _contact(self, state: State) -> np.ndarray:
        low, high = self.env._contact_force_range
        return np.clip(state.cfrc_ext, low, high)

    def observe(self, state):
        env = self.env
        n = len(state.qpos)
        position = state.qpos
        if env._exclude_current_positions_from_observation:
            position = position[:, 2:]
        parts = [position, state.qvel]
        if env._include_cfrc_ext_in_observation:
            parts.append(self._contact(state)[:, 1:].reshape(n, -1))
        return np.concatenate(parts, axis=1)

    def outcome(self, state, before, action):
        env = self.env
        n = len(state.qpos)
        velocity = (state.xpos[:, self.body, :2] - before) / self.dt
        x_velocity, y_velocity = velocity[:, 0], velocity[:, 1]
        forward = x_velocity * env._forward_reward_weight
        z = state.qpos[:, 2]
        min_z, max_z = env._healthy_z_range
        finite = np.all(np.isfinite(state.qpos), axis=1) & np.all(np.isfinite(state.qvel), axis=1)
        healthy = finite & (min_z <= z) & (z <= max_z)
        survive = healthy * env._healthy_reward
        ctrl_cost = _control_cost(env._ctrl_cost_weight, action)
        contact = np.square(self._contact(state)).reshape(n, -1)
        contact_cost = env._contact_cost_weight * np.sum(contact, axis=1)
        reward = forward + survive - (ctrl_cost + contact_cost)
        terminated = ~healthy & env._terminate_when_unhealthy
        infos = {
            **_xy_infos(state),
            "distance_from_origin": _distance_from_origin(state),
            "x_velocity": x_velocity,
            "y_velocity": y_velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": survive,
        }
        return reward, terminated, infos

    def reset_infos(self, state):
        return {**_xy_infos(state), "distance_from_origin": _norm(state.qpos[:, :2])}


class Humanoid(Task):
    """Walks forward; its centre of mass measures velocity; observes cinert, cvel and forces."""

    contact_forces = True

    def __init__(self, env):
        super().__init__(env)
        self.mass = self.model.body_mass.copy()

    def initial_state(self, rng):
        return _uniform_state(self, rng, normal_qvel=False)

    def position(self, state):
        # The centre of mass as Gymnasium's einsum over one env's bodies gives it (tested).
        return (np.einsum("b,nbj->nj", self.mass, state.xipos) / self.mass.sum())[:, 0:2]

    def observe(self, state):
        env = self.env
        n = len(state.qpos)
        position = state.qpos
        if env._exclude_current_positions_from_observation:
            position = position[:, 2:]
        parts = [position, state.qvel]
        if env._include_cinert_in_observation:
            parts.append(state.cinert[:, 1:].reshape(n, -1))
        if env._include_cvel_in_observation:
            parts.append(state.cvel[:, 1:].reshape(n, -1))
        if env._include_qfrc_actuator_in_observation:
            parts.append(state.qfrc_actuator[:, 6:])
        if env._include_cfrc_ext_in_observation:
            parts.append(state.cfrc_ext[:, 1:].reshape(n, -1))
        return np.concatenate(parts, axis=1)

    def outcome(self, state, before, action):
        env = self.env
        n = len(state.qpos)
        velocity = (self.position(state) - before) / self.dt
        x_velocity, y_velocity = velocity[:, 0], velocity[:, 1]
        forward = env._forward_reward_weight * x_velocity
        z = state.qpos[:, 2]
        min_z, max_z = env._healthy_z_range
        healthy = (min_z < z) & (z < max_z)
        survive = healthy * env._healthy_reward
        ctrl_cost = _control_cost(env._ctrl_cost_weight, state.ctrl)  # Gymnasium reads ctrl.
        contact = np.sum(np.square(state.cfrc_ext).reshape(n, -1), axis=1)
        contact_cost = np.clip(env._contact_cost_weight * contact, *env._contact_cost_range)
        reward = forward + survive - (ctrl_cost + contact_cost)
        terminated = ~healthy & env._terminate_when_unhealthy
        infos = {
            **self.reset_infos(state),
            "x_velocity": x_velocity,
            "y_velocity": y_velocity,
            "reward_survive": survive,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
        }
        return reward, terminated, infos

    def reset_infos(self, state):
        return {
            **_xy_infos(state),
            "tendon_length": state.ten_length.copy(),
            "tendon_velocity": state.ten_velocity.copy(),
            "distance_from_origin": _distance_from_origin(state),
        }


class Reacher(Task):
    """Brings a two-link arm's fingertip to a target drawn at each reset."""

    def __init__(self, env):
        super().__init__(env)
        self.fingertip = self.model.body("fingertip").id
        self.target = self.model.body("target").id

    def initial_state(self, rng):
        qpos = rng.uniform(low=-0.1, high=0.1, size=self.model.nq) + self.init_qpos
        while True:
            goal = rng.uniform(low=-0.2, high=0.2, size=2)
            if np.linalg.norm(goal) < 0.2:
                break
        qpos[-2:] = goal
        qvel = self.init_qvel + rng.uniform(low=-0.005, high=0.005, size=self.model.nv)
        qvel[-2:] = 0
        return qpos, qvel

    def position(self, state):
        return np.empty(len(state.qpos))  # The reward needs no position before the step.

    def _to_target(self, state: State) -> np.ndarray:
        return state.xpos[:, self.fingertip] - state.xpos[:, self.target]

    def observe(self, state):
        theta = state.qpos[:, :2]
        return np.concatenate(
            [
                np.cos(theta),
                np.sin(theta),
                state.qpos[:, 2:],
                state.qvel[:, :2],
                self._to_target(state)[:, :2],
            ],
            axis=1,
        )

    def outcome(self, state, before, action):
        env = self.env
        distance = -_norm(self._to_target(state)) * env._reward_dist_weight
        control = -np.square(action).sum(axis=1) * env._reward_control_weight
        reward = distance + control
        infos = {"reward_dist": distance, "reward_ctrl": control}
        return reward, np.zeros(len(reward), bool), infos


class Swimmer(Task):
    """Swims forward in a viscous fluid; never ends before its time limit."""

    def initial_state(self, rng):
        return _uniform_state(self, rng, normal_qvel=False)

    def position(self, state):
        return state.qpos[:, 0:2].copy()

    def observe(self, state):
        position = state.qpos
        if self.env._exclude_current_positions_from_observation:
            position = position[:, 2:]
        return np.concatenate([position, state.qvel], axis=1)

    def outcome(self, state, before, action):
        env = self.env
        velocity = (state.qpos[:, 0:2] - before) / self.dt
        forward = env._forward_reward_weight * velocity[:, 0]
        ctrl_cost = _control_cost(env._ctrl_cost_weight, action)
        infos = {
            **self.reset_infos(state),
            "x_velocity": velocity[:, 0],
            "y_velocity": velocity[:, 1],
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
        }
        return forward - ctrl_cost, np.zeros(len(before), bool), infos

    def reset_infos(self, state):
        return {**_xy_infos(state), "distance_from_origin": _distance_from_origin(state)}


class InvertedPendulum(Task):
    """Balances a pole on a cart; ends when the pole tilts past 0.2 rad."""

    def initial_state(self, rng):
        return _uniform_state(self, rng, normal_qvel=False)

    def position(self, state):
        return np.empty(len(state.qpos))

    def observe(self, state):
        return np.concatenate([state.qpos, state.qvel], axis=1)

    def outcome(self, state, before, action):
        obs = self.observe(state)
        terminated = ~np.all(np.isfinite(obs), axis=1) | (np.abs(obs[:, 1]) > 0.2)
        survive = (~terminated).astype(np.int64)  # Gymnasium's reward is an int here.
        return survive.astype(np.float64), terminated, {"reward_survive": survive}


class InvertedDoublePendulum(Task):
    """Balances two poles on a cart; ends when the tip falls to 1 m."""

    def initial_state(self, rng):
        return _uniform_state(self, rng, normal_qvel=True)

    def position(self, state):
        return np.empty(len(state.qpos))

    def observe(self, state):
        angles = state.qpos[:, 1:]
        return np.concatenate(
            [
                state.qpos[:, :1],
                np.sin(angles),
                np.cos(angles),
                np.clip(state.qvel, -10, 10),
                np.clip(state.qfrc_constraint, -10, 10)[:, :1],
            ],
            axis=1,
        )

    def outcome(self, state, before, action):
        x, y = state.site_xpos[:, 0, 0], state.site_xpos[:, 0, 2]
        v1, v2 = state.qvel[:, 1], state.qvel[:, 2]
        terminated = y <= 1
        # Row by row on NumPy scalars, whose ** is C's pow: an array's ** squares, and rounds
        # otherwise in the last bit.
        rows = [
            (0.01 * a**2 + (b - 2) ** 2, 0.001 * c**2 + 0.005 * d**2)
            for a, b, c, d in zip(x, y, v1, v2, strict=True)
        ]
        distance, velocity = np.array(rows).T
        survive = self.env._healthy_reward * (~terminated).astype(np.int64)
        infos = {
            "reward_survive": survive,
            "distance_penalty": -distance,
            "velocity_penalty": -velocity,
        }
        return survive - distance - velocity, terminated, infos


TASKS: dict[str, type[Task]] = {
    "HalfCheetah-v5": HalfCheetah,
    "Hopper-v5": Hopper,
    "Walker2d-v5": Walker2d,
    "Ant-v5": Ant,
    "Humanoid-v5": Humanoid,
    "Reacher-v5": Reacher,
    "Swimmer-v5": Swimmer,
    "InvertedPendulum-v5": InvertedPendulum,
    "InvertedDoublePendulum-v5": InvertedDoublePendulum,
}


def task_class(env_id: str) -> type[Task]:
    """The task of a Gymnasium id, or a ValueError naming the ids implemented."""
    if env_id not in TASKS:
        raise ValueError(
            f"BatchEnv.mujoco does not implement {env_id!r}: it implements {', '.join(TASKS)}"
        )
    return TASKS[env_id]

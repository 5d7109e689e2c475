"""Gymnasium's v5 locomotion tasks over a batch.

HalfCheetah, Hopper, Walker2d, Ant, Humanoid and Swimmer.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from batchrl.envs.mujoco import task


class _Planar(task.Task):
    """HalfCheetah, Hopper and Walker2d: x velocity from qpos[0], qpos[0] left out of obs.

    Hopper and Walker2d also pay for staying healthy and end when they are not.
    """

    normal_qvel: ClassVar[bool] = False
    clip_qvel: ClassVar[bool] = True
    has_health: ClassVar[bool] = True  # Whether it pays for staying healthy.

    def initial_state(self, rng):
        return task.uniform_state(self, rng, self.normal_qvel)

    def position(self, state):
        return state.qpos[:, 0].copy()

    def observe(self, state):
        velocity = np.clip(state.qvel, -10, 10) if self.clip_qvel else state.qvel
        return np.concatenate((task.observed_qpos(self, state, 1), velocity), axis=1)

    def healthy(self, state: task.PhysicsState) -> np.ndarray:
        """Whether each env is healthy, for a task with health."""
        raise NotImplementedError

    def outcome(self, state, before, action):
        env = self.env
        x_velocity = (state.qpos[:, 0] - before) / self.dt
        forward = env._forward_reward_weight * x_velocity
        ctrl_cost = task.control_cost(env._ctrl_cost_weight, action)
        rewards = {"reward_forward": forward, "reward_ctrl": -ctrl_cost}
        if not self.has_health:
            reward = forward - ctrl_cost
            terminated = np.zeros(len(before), bool)
        else:
            healthy = self.healthy(state)
            survive = healthy * env._healthy_reward
            reward = forward + survive - ctrl_cost
            terminated = ~healthy & env._terminate_when_unhealthy
            rewards["reward_survive"] = survive
        infos = {**self.reset_infos(state), "x_velocity": x_velocity, **rewards}
        return reward, terminated, infos

    def reset_infos(self, state):
        infos = {"x_position": state.qpos[:, 0].copy()}
        if self.has_health:
            infos["z_distance_from_origin"] = state.qpos[:, 1] - self.init_qpos[1]
        return infos


class HalfCheetah(_Planar):
    """Runs forward; never ends before its time limit."""

    normal_qvel = True
    clip_qvel = False
    has_health = False


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


class Ant(task.Task):
    """Walks forward on four legs; pays for contact forces, which it also observes."""

    contact_forces = True

    def __init__(self, env):
        super().__init__(env)
        self.body = self.model.body(env._main_body).id

    def initial_state(self, rng):
        return task.uniform_state(self, rng, normal_qvel=True)

    def position(self, state):
        return state.xpos[:, self.body, :2].copy()

    def _contact(self, state: task.PhysicsState) -> np.ndarray:
        low, high = self.env._contact_force_range
        return np.clip(state.cfrc_ext, low, high)

    def observe(self, state):
        n = len(state.qpos)
        parts = [task.observed_qpos(self, state, 2), state.qvel]
        if self.env._include_cfrc_ext_in_observation:
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
        ctrl_cost = task.control_cost(env._ctrl_cost_weight, action)
        contact = np.square(self._contact(state)).reshape(n, -1)
        contact_cost = env._contact_cost_weight * np.sum(contact, axis=1)
        reward = forward + survive - (ctrl_cost + contact_cost)
        terminated = ~healthy & env._terminate_when_unhealthy
        infos = {
            **task.xy_infos(state),
            "distance_from_origin": task.distance_from_origin(state),
            "x_velocity": x_velocity,
            "y_velocity": y_velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": survive,
        }
        return reward, terminated, infos

    def reset_infos(self, state):
        return {**task.xy_infos(state), "distance_from_origin": task.norm(state.qpos[:, :2])}


class Humanoid(task.Task):
    """Walks forward; its centre of mass measures velocity; observes cinert, cvel and forces."""

    contact_forces = True

    def __init__(self, env):
        super().__init__(env)
        self.mass = self.model.body_mass.copy()

    def initial_state(self, rng):
        return task.uniform_state(self, rng, normal_qvel=False)

    def position(self, state):
        # The centre of mass as Gymnasium's einsum over one env's bodies gives it (tested).
        return (np.einsum("b,nbj->nj", self.mass, state.xipos) / self.mass.sum())[:, 0:2]

    def observe(self, state):
        env = self.env
        n = len(state.qpos)
        parts = [task.observed_qpos(self, state, 2), state.qvel]
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
        ctrl_cost = task.control_cost(env._ctrl_cost_weight, state.ctrl)  # Gymnasium reads ctrl.
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
            **task.xy_infos(state),
            "tendon_length": state.ten_length.copy(),
            "tendon_velocity": state.ten_velocity.copy(),
            "distance_from_origin": task.distance_from_origin(state),
        }


class Swimmer(task.Task):
    """Swims forward in a viscous fluid; never ends before its time limit."""

    def initial_state(self, rng):
        return task.uniform_state(self, rng, normal_qvel=False)

    def position(self, state):
        return state.qpos[:, 0:2].copy()

    def observe(self, state):
        return np.concatenate([task.observed_qpos(self, state, 2), state.qvel], axis=1)

    def outcome(self, state, before, action):
        env = self.env
        velocity = (state.qpos[:, 0:2] - before) / self.dt
        forward = env._forward_reward_weight * velocity[:, 0]
        ctrl_cost = task.control_cost(env._ctrl_cost_weight, action)
        infos = {
            **self.reset_infos(state),
            "x_velocity": velocity[:, 0],
            "y_velocity": velocity[:, 1],
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
        }
        return forward - ctrl_cost, np.zeros(len(before), bool), infos

    def reset_infos(self, state):
        return {**task.xy_infos(state), "distance_from_origin": task.distance_from_origin(state)}

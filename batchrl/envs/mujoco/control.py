"""Gymnasium's v5 control tasks over a batch: Reacher, Pusher and the inverted pendulums."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from batchrl.envs.mujoco import task


class Reacher(task.Task):
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

    def _to_target(self, state: task.PhysicsState) -> np.ndarray:
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
        distance = -task.norm(self._to_target(state)) * env._reward_dist_weight
        control = -np.square(action).sum(axis=1) * env._reward_control_weight
        reward = distance + control
        infos = {"reward_dist": distance, "reward_ctrl": control}
        return reward, np.zeros(len(reward), bool), infos


class Pusher(task.Task):
    """A seven-joint arm pushes a cylinder, drawn at each reset, to a goal at the origin."""

    def __init__(self, env):
        super().__init__(env)
        self.tips = self.model.body("tips_arm").id
        self.object = self.model.body("object").id
        self.goal = self.model.body("goal").id

    def initial_state(self, rng):
        qpos = self.init_qpos.copy()
        while True:
            cylinder = np.concatenate(
                [rng.uniform(low=-0.3, high=0, size=1), rng.uniform(low=-0.2, high=0.2, size=1)]
            )
            if np.linalg.norm(cylinder) > 0.17:  # Away from the goal, at (0, 0).
                break
        qpos[-4:-2] = cylinder
        qpos[-2:] = 0.0
        qvel = self.init_qvel + rng.uniform(low=-0.005, high=0.005, size=self.model.nv)
        qvel[-4:] = 0
        return qpos, qvel

    def observe(self, state):
        bodies = (self.tips, self.object, self.goal)
        positions = [state.xpos[:, body] for body in bodies]
        return np.concatenate([state.qpos[:, :7], state.qvel[:, :7], *positions], axis=1)

    def outcome(self, state, before, action):
        env = self.env
        near = -task.norm(state.xpos[:, self.object] - state.xpos[:, self.tips])
        dist = -task.norm(state.xpos[:, self.object] - state.xpos[:, self.goal])
        near, dist = near * env._reward_near_weight, dist * env._reward_dist_weight
        control = -np.square(action).sum(axis=1) * env._reward_control_weight
        infos = {"reward_dist": dist, "reward_ctrl": control, "reward_near": near}
        return dist + control + near, np.zeros(len(dist), bool), infos


class _Balancing(task.Task):
    """A cart balancing poles, started near upright with uniform or normal velocity noise."""

    normal_qvel: ClassVar[bool] = False

    def initial_state(self, rng):
        return task.uniform_state(self, rng, self.normal_qvel)


class InvertedPendulum(_Balancing):
    """Balances a pole on a cart; ends when the pole tilts past 0.2 rad."""

    def observe(self, state):
        return np.concatenate([state.qpos, state.qvel], axis=1)

    def outcome(self, state, before, action):
        obs = self.observe(state)
        terminated = ~np.all(np.isfinite(obs), axis=1) | (np.abs(obs[:, 1]) > 0.2)
        survive = (~terminated).astype(np.int64)  # Gymnasium's reward is an int here.
        return survive.astype(np.float64), terminated, {"reward_survive": survive}


class InvertedDoublePendulum(_Balancing):
    """Balances two poles on a cart; ends when the tip falls to 1 m."""

    normal_qvel = True

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

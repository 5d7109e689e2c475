"""MujocoGroup: a batch's envs as simulations of one `mujoco.batch.Batch`, in this process.

MuJoCo steps the simulations in C threads with the GIL released; observations,
rewards and resets are NumPy over the whole batch (`locomotion.py`, `control.py`). No process and no
message stands between the policy and the physics. A `Group`, so
`BatchEnv` steps it, autoresets it and serves its infos as any other group.

Env i keeps its own `np_random`, seeded as Gymnasium seeds one env, so env i reset
with seed s starts where `gym.make(env_id).reset(seed=s)` starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from batchrl.envs import spaces
from batchrl.envs.host import actions as actions_lib
from batchrl.envs.host import arguments, forwarding, mujoco_warnings, polling, split, stepper
from batchrl.envs.host import autoreset as autoreset_lib
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host.group import Step
from batchrl.envs.mujoco import task as task_lib
from batchrl.envs.mujoco import tasks


class MujocoGroup(forwarding.EnvForwarding):
    """`num_envs` envs of one MuJoCo task stepped on `threads` threads.

    None: one per core this process may run on (`split.cores`, its CPU affinity), where
    MuJoCo's own default would start one per core of the machine.
    """

    def __init__(self, env_id: str, num_envs: int, *, threads: int | None = None, **env_kwargs):
        task_class = tasks.task_class(env_id)
        num_envs = arguments.check_num_envs(num_envs)
        threads = arguments.check_threads(threads)
        tasks.check_keywords(env_id, env_kwargs)
        skip = env_kwargs.get("frame_skip", 1)  # 0 divides by zero in Gymnasium's env.
        if isinstance(skip, bool) or not isinstance(skip, int | np.integer) or skip < 1:
            raise ValueError(f"frame_skip must be a whole number, at least 1, got {skip!r}")
        mode = env_kwargs.get("render_mode")
        if mode not in (None, "rgb_array", "depth_array"):  # Drawn by Gymnasium's env's step.
            raise ValueError(
                f"BatchEnv.mujoco draws a frame when render() asks: render_mode None, "
                f"'rgb_array' or 'depth_array', got {mode!r} (windows and frame lists need "
                "Gymnasium's envs stepping: BatchEnv.external)"
            )
        # The task's settings, spaces, spec and renderer are those of Gymnasium's own env.
        with mujoco_warnings.routed():
            self._template = gym.make(env_id, **env_kwargs)
        self._template.reset()  # Gymnasium renders only a reset env; its state is set per call.
        env = self._template.unwrapped
        self.task = task_class(env)
        self.num_envs = num_envs
        self.name = env_id
        self.observation_space = spaces.check_observation_space(env.observation_space, env_id)
        self.action_space = spaces.check_action_space(env.action_space, env_id)
        self.buffers = stepper.Buffers.allocate(num_envs, self.observation_space, self.action_space)
        self.restarts = 0
        self._max_steps = self._template.spec.max_episode_steps
        self._frame_skip = env.frame_skip
        self.threads = threads or split.cores()
        self._batch = mujoco.batch.Batch(
            env.model, num_envs, nthread=self.threads, persistent=self.task.contact_forces
        )
        batch = self._batch
        self._initial_rows = _initial_rows(batch, env.model)
        self._state = task_lib.PhysicsState(
            **{
                name: batch.bind(name)
                for name in (
                    "qpos",
                    "qvel",
                    "ctrl",
                    "xpos",
                    "xipos",
                    "cinert",
                    "cvel",
                    "qfrc_actuator",
                    "ten_length",
                    "ten_velocity",
                    "site_xpos",
                    "qfrc_constraint",
                )
            },
            cfrc_ext=np.zeros((num_envs, env.model.nbody, 6)),
        )
        self._data = mujoco.MjData(env.model) if self.task.contact_forces else None
        # A simulation with neither contacts nor equality rows has no external force: its
        # cfrc_ext is zero without copying its data out (the group applies no xfrc_applied).
        self._constrained = (
            (batch.bind("ncon"), batch.bind("ne")) if self.task.contact_forces else None
        )
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._rng_seeds: list[int | None] = [None] * num_envs  # Gymnasium's np_random_seed.
        self._elapsed = np.zeros(num_envs, np.int64)
        self._autoreset = autoreset_lib.Autoreset(num_envs)
        self._mode = AutoresetMode.DISABLED
        self._given: np.ndarray | None = None  # The step's actions, of another dtype.
        self._pending_reset: tuple | None = None

    # -- the group interface ----------------------------------------------------------------

    def step_async(
        self,
        actions: np.ndarray,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
    ) -> None:
        if any(rng is None for rng in self._rngs):  # As Gymnasium's envs: OrderEnforcing's.
            raise gym.error.ResetNeeded(f"{self.name}: cannot step before reset: call reset()")
        self.buffers.action[...] = actions
        # Actions of another dtype (float64) act as given, as on Gymnasium's env: its control
        # cost is computed in their dtype.
        self._given = actions_lib.as_given(np.asarray(actions), self.buffers.action)
        self._mode = autoreset

    def step_wait(self) -> Step:
        """Steps every env (NEXT_STEP: resets those that ended instead); results in the buffers."""
        polling.hear()  # A run's second Ctrl-C stops its phase here, before the step.
        buffers, state, task = self.buffers, self._state, self.task
        action = buffers.action.copy() if self._given is None else np.array(self._given)
        due = self._autoreset.due(self._mode)
        stepped = None if due is None else np.flatnonzero(~due)
        before = task.position(state)
        if stepped is None:
            state.ctrl[:] = action
        else:
            state.ctrl[stepped] = action[stepped]
        if stepped is None or len(stepped):
            self._batch.step(stepped, nstep=self._frame_skip)
        if task.contact_forces:
            self._contact_forces(stepped)
        buffers.obs[...] = task.observe(state)
        reward, terminated, columns = task.outcome(state, before, action)
        buffers.reward[:] = reward
        buffers.terminated[:] = terminated
        self._elapsed += 1
        np.greater_equal(self._elapsed, self._max_steps, out=buffers.truncated)
        special: dict[int, dict] = {}
        if due is not None:  # NEXT_STEP: the envs that ended last step start anew.
            reset = np.flatnonzero(due)
            for i, info in zip(reset, self._reset(reset, [None] * len(reset)), strict=True):
                special[int(i)] = info
            buffers.reward[reset] = 0.0
            buffers.terminated[reset] = False
            buffers.truncated[reset] = False
        finals = self._autoreset.stepped(self._mode, buffers.terminated, buffers.truncated)
        if len(finals):  # SAME_STEP: the envs that ended start anew at once.
            final_obs = buffers.obs[finals].copy()
            columns = task_lib.resolved(columns)  # The final infos are kept: compute them now.
            final_infos = [_row(columns, i) for i in finals]
            for n, info in enumerate(self._reset(finals, [None] * len(finals))):
                special[int(finals[n])] = autoreset_lib.final(final_obs[n], final_infos[n], info)
        infos = infos_lib.Owed(
            lambda: infos_lib.Columns(task_lib.resolved(columns), self.num_envs, special)
        )
        return buffers.obs, buffers.reward, buffers.terminated, buffers.truncated, infos

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        self._pending_reset = (np.asarray(indices, np.int64), list(seeds))

    def reset_wait(self) -> tuple[np.ndarray, list[dict]]:
        indices, seeds = self._pending_reset
        self._pending_reset = None
        order = np.argsort(indices)  # BatchEnv.reset_at takes envs in any order.
        infos = self._reset(indices[order], [seeds[k] for k in order])
        self._autoreset.reset(indices)
        return self.buffers.obs[indices], [infos[k] for k in np.argsort(order)]

    def _env(self, index: int) -> gym.Env:
        """The task's Gymnasium env, which every env of the group shares, in env `index`'s state.

        So `attribute` reads it and `call` runs on it (`render`).
        """
        self._load(index)
        return self._template

    def attribute(self, index: int, name: str) -> Any:
        """Env `index`'s attribute `name`; its own `np_random`, seed, step count and MjData.

        The shared env holds only the env loaded last: its `data` is copied, so that each
        env's stays its own.
        """
        if name == "np_random" and self._rngs[index] is not None:
            return self._rngs[index]
        if name == "np_random_seed" and self._rngs[index] is not None:
            return self._rng_seeds[index]
        if name == "_elapsed_steps":  # TimeLimit's count, which the shared env never steps.
            return int(self._elapsed[index])
        value = super().attribute(index, name)
        return copy.copy(value) if value is self._template.unwrapped.data else value

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Runs method `name` on the shared env in env `index`'s state; keeps what it changed.

        A method that moves the simulation (`set_state`, `do_simulation`) moved the shared
        env alone, and env `index` stepped on from where it was: its state goes back into
        env `index`'s simulation. `reset` and `step` are the batch's: it counts their steps.
        """
        if name in ("reset", "step"):
            raise ValueError(
                f"BatchEnv.mujoco {name}s its envs in the batch, not by call({name!r}): use "
                f"its {name}()"
                + (', options={"reset_mask": mask} for some' if name == "reset" else "")
            )
        if name == "render" and self._rngs[index] is None:  # As OrderEnforcing refuses it.
            raise gym.error.ResetNeeded(f"{self.name}: cannot render before reset: call reset()")
        self._load(index)  # Whatever `attribute` reads: what is stored back is env `index`'s.
        value = super().call(index, name, args, kwargs)
        self._store(index)
        return value

    def set_attr(self, index: int, name: str, value: Any) -> None:
        raise AttributeError(
            f"envs of BatchEnv.mujoco share one {self.name} and cannot set {name!r} per env; "
            "pass the setting to BatchEnv.mujoco as a keyword"
        )

    def ready(self, timeout: float) -> bool:
        return True  # The envs step in `step_wait` and reset in `reset_wait`.

    def close(self) -> None:
        """Closes the shared env and frees the batch: its threads and its simulations' memory.

        The batch has no close of its own; it ends with the last reference to it or its views.
        """
        self._template.close()
        self._batch = self._state = self._initial_rows = self._constrained = None

    # -- plumbing ---------------------------------------------------------------------------

    def _reset(self, indices: np.ndarray, seeds: Sequence[int | None]) -> list[dict]:
        """Resets envs as Gymnasium's `reset` does; writes their obs; returns their infos.

        `indices` ascend, as `mujoco.batch` takes them.
        """
        if not len(indices):
            return []
        state, task = self._state, self.task
        starts = []
        for i, seed in zip(indices, seeds, strict=True):
            if seed is not None or self._rngs[i] is None:
                self._rngs[i], self._rng_seeds[i] = seeding.np_random(seed)
            starts.append(task.initial_state(self._rngs[i]))
        if self._initial_rows is None:
            self._batch.reset(indices, stage=mujoco.mjtStage.mjSTAGE_NONE)
        else:
            for field, initial in self._initial_rows:
                field[indices] = initial
        state.qpos[indices] = [qpos for qpos, _ in starts]
        state.qvel[indices] = [qvel for _, qvel in starts]
        self._batch.forward(indices)
        state.cfrc_ext[indices] = 0.0  # What mj_resetData leaves: a reset computes no contacts.
        self._elapsed[indices] = 0
        self.buffers.obs[indices] = task.observe(state)[indices]
        columns = task_lib.resolved(task.reset_infos(state))
        return [_row(columns, i) for i in indices]

    def _contact_forces(self, stepped: np.ndarray | None) -> None:
        """cfrc_ext as Gymnasium computes it: mj_rnePostConstraint after the step.

        Only simulations with contacts or equality constraints at the step's last
        evaluation are copied out, about a third of random-action Ants; the rest are zero.
        """
        model, data, cfrc_ext = self.task.model, self._data, self._state.cfrc_ext
        ncon, ne = self._constrained
        if stepped is None:
            cfrc_ext[...] = 0.0
            forced = np.flatnonzero((ncon > 0) | (ne > 0))
        else:
            cfrc_ext[stepped] = 0.0
            forced = stepped[(ncon[stepped] > 0) | (ne[stepped] > 0)]
        for i in forced.tolist():
            self._batch.get_data(i, data)
            mujoco.mj_rnePostConstraint(model, data)
            cfrc_ext[i] = data.cfrc_ext

    def _load(self, index: int) -> None:
        """Puts env `index`'s state into the task's Gymnasium env, to render or read it."""
        env = self._template.unwrapped
        self._batch.get_data(int(index), env.data)
        mujoco.mj_forward(env.model, env.data)

    def _store(self, index: int) -> None:
        """Writes the shared env's integration state into env `index`'s, where they differ.

        Loaded, the two are equal to the bit; a call that changed one field of it changed
        the state env `index` steps on.
        """
        data, batch = self._template.unwrapped.data, self._batch
        views = [(batch.bind(name), getattr(data, name)) for name in _stored_fields(batch)]
        if all(np.array_equal(view[index], value) for view, value in views):
            return
        if self._initial_rows is None:  # The views do not hold the whole state.
            raise ValueError(
                f"this MuJoCo's state has parts BatchEnv.mujoco cannot set: a call that "
                f"changes the state of {self.name} cannot be kept"
            )
        for view, value in views:
            view[index] = value
        batch.forward(np.array([index]))


# MjData's fields of one simulation's integration state (mjSTATE_INTEGRATION).
_INTEGRATION_STATE = (
    "time",
    "qpos",
    "qvel",
    "act",
    "history",
    "qacc_warmstart",
    "ctrl",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
    "plugin_state",
    "plastic",
)


def _stored_fields(batch: mujoco.batch.Batch) -> list[str]:
    """The names of `_INTEGRATION_STATE` that this batch holds, each of some size."""
    names = [name for name in _INTEGRATION_STATE if name in mujoco.batch.DATA_FIELDS]
    return [name for name in names if batch.bind(name)[0].size]


def _initial_rows(batch: mujoco.batch.Batch, model: mujoco.MjModel) -> list | None:
    """The batch's state views but qpos and qvel, each with the row `Batch.reset` writes.

    A reset writes these rows itself (and its own qpos and qvel): a few NumPy writes in
    this thread, where `Batch.reset` is a round trip to the batch's threads of 50-90 us
    after a step (32 random-action Hoppers: 24.6k env-steps/s against 23.3k). None, so
    that resets go to `Batch.reset`, when the fields do not make up the whole integration
    state (a MuJoCo with a state component this list lacks).
    """
    batch.reset()
    views = {name: batch.bind(name) for name in _stored_fields(batch)}
    size = sum(v[0].size for v in views.values())
    if size != mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION):
        return None
    drawn = ("qpos", "qvel")  # Each reset writes its own initial qpos and qvel.
    return [(v, v[0].copy()) for name, v in views.items() if name not in drawn]


def _row(columns: dict[str, np.ndarray], i: int) -> dict:
    return {key: value[i] for key, value in columns.items()}

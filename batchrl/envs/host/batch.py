"""BatchEnv: many envs stepped together, in parallel when they live in worker processes.

Envs are held in groups: a worker process hosting k envs (`ProcessGroup`), or envs in
this process (`LocalGroup`). A batch step sends every worker its actions first, then
collects, so workers step at the same time; the messaging cost is paid per worker,
not per env. `BatchEnv` is a Gymnasium `VectorEnv`: envs autoreset inside their
workers, and infos are Gymnasium's dict of arrays (fetched when first read with
`lazy_infos`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from batchrl import env_spec
from batchrl.envs.host import actions as actions_lib
from batchrl.envs.host import (
    arguments,
    async_calls,
    env_checks,
    env_requests,
    fan_out,
    local,
    obs_tree,
    stepper,
    vector_infos,
)
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host.group import Group


class BatchEnvBase(async_calls.AsyncCalls, env_requests.EnvCalls, gym.vector.VectorEnv):
    """A batch of envs with shared spaces over groups already started: a Gymnasium `VectorEnv`.

    `step` and `reset` behave as Gymnasium's vector envs do, with `autoreset_mode`
    NEXT_STEP (the default), SAME_STEP or DISABLED; env i is seeded with seed + i.
    `step_into` and `reset_at` are the lower level beneath: a step without autoreset
    into the caller's arrays, and a reset of chosen envs (what `InGraphBatchEnv` uses).
    Observations are trees as Gymnasium batches the observation space (dicts for `Dict`,
    tuples for `Tuple`, arrays [B, *shape] in the space's dtype); actions likewise, trees
    of `Box`, `Discrete`, `MultiDiscrete` and `MultiBinary` arrays. Returned arrays are
    fresh copies, safe to keep. Infos are a plain dict, as `SyncVectorEnv`'s; with
    `lazy_infos` set, a dict that fetches them from the envs only when first read (a
    step loop that never reads them saves their transport). `batchrl.envs.BatchEnv` is
    this with the builders that start the groups.
    """

    lazy_infos: bool = False

    def __init__(
        self,
        groups: Sequence[Group],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        observation_mode: Any = "same",
    ):
        """A batch over `groups` already started, in order.

        The groups close with the batch, or now if it cannot be made. `BatchEnv`'s
        builders start the groups for you. `observation_mode` is `AsyncVectorEnv`'s:
        "same" (every env's observation space equal), "different" (only their kinds,
        shapes and dtypes; the batch's space is Gymnasium's `batch_differing_spaces`), or
        a tuple (batched space, single space).
        """
        groups = list(groups)
        try:
            self._init(groups, autoreset_mode, observation_mode)
        except BaseException:
            for started in filter(_is_group, groups):
                started.close()
            raise

    def _init(
        self, groups: list[Group], autoreset_mode: AutoresetMode | str, observation_mode: Any
    ) -> None:
        if not groups:
            raise ValueError("a BatchEnv needs at least one group of envs, got none")
        for given in groups:
            if not _is_group(given):
                raise TypeError(
                    f"BatchEnv takes groups of envs (Group), got {given!r}: build a "
                    f"batch of env objects with BatchEnv.from_envs(envs)"
                )
        self._groups = groups
        self.autoreset_mode = arguments.check_autoreset_mode(autoreset_mode)
        self.observation_mode = arguments.check_observation_mode(observation_mode)
        first, starts = groups[0], np.cumsum([0] + [g.num_envs for g in groups])
        places = [
            getattr(g, "first_index", start) for g, start in zip(groups, starts, strict=False)
        ]
        for other, start in zip(groups[1:], places[1:], strict=True):  # Named by place.
            named = (f"{first.name} (env {places[0]})", first, f"{other.name} (env {start})", other)
            env_checks.same_spaces(*named, observation_mode)
        self.num_envs = sum(g.num_envs for g in groups)
        self.single_action_space: gym.Space = first.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space, self.single_observation_space = self._observation_spaces()
        self.spec = first.attribute(0, "spec")
        self.render_mode = first.attribute(0, "render_mode")
        self.metadata = {**first.attribute(0, "metadata"), "autoreset_mode": self.autoreset_mode}
        bounds = np.cumsum([0] + [g.num_envs for g in groups])
        self._slices = [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]
        self._sizes = tuple(g.num_envs for g in groups)
        self._owner = np.repeat(np.arange(len(groups)), self._sizes)
        self._obs_shapes = obs_tree.shapes(self.single_observation_space, self.num_envs)
        self._obs_kinds = obs_tree.variable_kinds(self.single_observation_space)
        self._action_kinds = obs_tree.variable_kinds(self.single_action_space)
        nested = isinstance(self.single_action_space, gym.spaces.Dict | gym.spaces.Tuple)
        nested = nested or self._action_kinds is not None
        shapes = obs_tree.shapes(self.single_action_space, self.num_envs) if nested else None
        self._action_shapes = shapes  # None: a flat action space, one array.
        # Each step's collection order, made once: envs in this process go first.
        self._step_plan = local.local_first(
            [(g, (n, part)) for n, (g, part) in enumerate(zip(groups, self._slices, strict=True))]
        )

    def _observation_spaces(self) -> tuple[gym.Space, gym.Space]:
        """The batch's observation space and one env's, as `observation_mode` makes them."""
        mode, first = self.observation_mode, self._groups[0]
        if isinstance(mode, tuple):
            batched, single = mode
            env_checks.same_layout_as_given(single, first.name, first.observation_space)
            return batched, single
        if mode == "same":
            return batch_space(first.observation_space, self.num_envs), first.observation_space
        each = [
            group.attribute(i, "observation_space")
            for group in self._groups
            for i in range(group.num_envs)
        ]
        return batch_differing_spaces(each), each[0]

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else self._groups[0].name
        return f"{type(self).__name__}({name}, num_envs={self.num_envs})"

    @property
    def groups(self) -> tuple[Group, ...]:
        """The batch's groups of envs, in env order."""
        return tuple(self._groups)

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """Each env's seed, as Gymnasium's vector envs give them (-1 where unknown)."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each env's random generator; copies for envs in other processes."""
        return self.get_attr("np_random")

    @property
    def restarts(self) -> int:
        """How many worker restarts happened in this batch."""
        return sum(g.restarts for g in self._groups)

    # -- Gymnasium's vector API -------------------------------------------------------------

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every env, autoresetting as `autoreset_mode` says; Gymnasium's five results.

        The observations are a tree as Gymnasium batches the observation space (an array
        for a `Box`). The infos are Gymnasium's dict of arrays with `_key` masks.
        `step_async` and `step_wait` are its halves, as `AsyncVectorEnv`'s.
        """
        self.step_async(actions)
        return self.step_wait()

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Resets every env (or those of `options["reset_mask"]`); returns the whole batch's obs.

        `seed`: None, an int (env i gets seed + i) or one seed per env. `reset_async` and
        `reset_wait` are its halves, as `AsyncVectorEnv`'s.
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Closes every env and ends every worker; `close()` calls it once.

        A call in flight is warned of, as `AsyncVectorEnv` does, and dropped: collected
        within `timeout` s (None: the workers' own), with `terminate` not; a busy worker is
        killed. Workers are waited for as their envs close (a video's last frames written),
        each up to its timeout; with `terminate`, killed at once.
        """
        self._drop_pending(0.0 if terminate else timeout)
        if terminate:
            for g in self._groups:
                getattr(g, "kill", g.close)()
            return
        for g in self._groups:  # Every worker closes its envs at once, not one after another.
            getattr(g, "close_begin", lambda: None)()
        for g in self._groups:
            g.close()

    def __enter__(self) -> BatchEnvBase:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- the lower level --------------------------------------------------------------------

    def step_into(
        self,
        actions: Any,
        obs: Any,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        autoreset_mode: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
        as_given: bool = False,
    ) -> infos_lib.Infos:
        """A step written into the given arrays [B, ...], by default without autoreset.

        `obs` is a tree of arrays [B, *leaf_shape] nested as the batch's observations (dict
        keys matched by name); returns one info dict per env. For callers that own the
        result memory and reset envs themselves (the in-graph bridge writes into XLA's
        buffers): no result array allocated or copied a step. Values are cast to the
        arrays' dtypes. `read_infos`: the caller reads the infos at once, so workers send them.
        `as_given`: the envs get the actions in the dtypes given, as `step` passes them.
        """
        self._expect_no_call("step_into")
        obs_tree.check(obs, self._obs_shapes)
        self.step_into_async(actions, autoreset_mode, read_infos, as_given)
        return self.step_into_wait(obs, reward, terminated, truncated)

    def _send_step(
        self,
        actions: Any,
        mode: AutoresetMode,
        read_infos: bool = False,
        strict: bool = False,
        as_given: bool = False,
    ) -> None:
        """Sends every group its actions; `_collect_step` collects their results.

        `strict` refuses actions that a cast to the space's dtypes would change, as
        Gymnasium's vector envs refuse them (`step`); `step_into` casts them. `as_given`:
        arrays reach the envs in their own dtypes (float64 for a float32 `Box`), as
        Gymnasium's envs get them; lists and numbers, which have none, in the space's
        (where a `Box` checks its actions, it casts a list so); else all in the space's.
        """
        space, shapes, kinds = self.single_action_space, self._action_shapes, self._action_kinds
        checked = actions_lib.checked(actions, space, self.num_envs, shapes, kinds)
        like = self._groups[0].buffers.action
        if strict:
            env_spec.check_action_kinds(checked, like)
        self._expect_open()
        actions = actions_lib.sent(actions, checked, like, as_given)
        sent = 0
        try:
            for g, part in zip(self._groups, self._slices, strict=True):
                g.step_async(obs_tree.take(actions, part), mode, read_infos)
                sent += 1
        except BaseException as error:
            fan_out.abandon(self._groups[:sent], error)
            raise

    def _collect_step(
        self, obs: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> infos_lib.Infos:
        """The results of the step in flight, written into the given arrays; its infos."""
        chunks: list[Any] = [None] * len(self._groups)

        def collect(g: Any, numbered: tuple[int, slice]) -> None:
            number, part = numbered
            results = g.step_wait()
            group_obs, reward[part], terminated[part], truncated[part], chunks[number] = results
            obs_tree.put(obs, part, group_obs)

        fan_out.collect_all(self._step_plan, collect)
        return infos_lib.Infos(chunks, self._sizes)

    def reset_at(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int | None] | None = None,
        options: dict | None = None,
    ) -> tuple[Any, list[dict]]:
        """Resets the envs at `indices` (all when None): env i gets seed + i, or its own seed.

        `seed` is None, an int, or a list of one seed per env reset. Returns their obs
        (a tree of [len(indices), ...]) and one info dict each, in the order given.
        """
        self._expect_no_call("reset_at")
        indices = arguments.check_indices(indices, self.num_envs)
        if seed is None or isinstance(seed, int | np.integer):
            seeds = [None if seed is None else int(seed) + int(i) for i in indices]
        else:
            seeds = arguments.check_seeds(seed, len(indices))
        return self._reset(indices, seeds, options)

    # -- plumbing ---------------------------------------------------------------------------

    def _reset(
        self, indices: np.ndarray, seeds: Sequence[int | None], options: dict | None
    ) -> tuple[Any, list[dict]]:
        return self._collect_reset(indices, self._send_reset(indices, seeds, options))

    def _send_reset(
        self, indices: np.ndarray, seeds: Sequence[int | None], options: dict | None
    ) -> list[tuple[Any, np.ndarray]]:
        """Asks the groups to reset the envs at `indices`; the (group, envs) to collect."""
        self._expect_open()
        seed_of = dict(zip(indices.tolist(), seeds, strict=True))
        sent = []
        try:
            for number, (g, part) in enumerate(zip(self._groups, self._slices, strict=True)):
                mine = indices[self._owner[indices] == number]
                if len(mine):
                    g.reset_async(list(mine - part.start), [seed_of[int(i)] for i in mine], options)
                    sent.append((g, mine))
        except BaseException as error:
            fan_out.abandon((g for g, _ in sent), error)
            raise
        return sent

    def _collect_reset(
        self, indices: np.ndarray, sent: list[tuple[Any, np.ndarray]]
    ) -> tuple[Any, list[dict]]:
        """The obs and infos of the reset `_send_reset` asked for, in the order of `indices`."""
        obs = obs_tree.empty(self.single_observation_space, len(indices))
        infos: list[dict] = [{}] * len(indices)
        position = {int(i): n for n, i in enumerate(indices)}

        def collect(g: Any, mine: np.ndarray) -> None:
            group_obs, group_infos = g.reset_wait()
            rows = [position[int(i)] for i in mine]
            obs_tree.put(obs, rows, group_obs)
            for row, info in zip(rows, group_infos, strict=True):
                infos[row] = info

        fan_out.collect_all(local.local_first(sent), collect)
        self._reset_done(indices)
        return obs, infos

    def _locate(self, env: int) -> tuple[Any, int]:
        """The group that holds env `env` of the batch, and the env's index in it."""
        number = int(self._owner[env])
        return self._groups[number], int(env) - self._slices[number].start

    def _all_obs(self) -> Any:
        """A copy of every env's latest obs, as the groups' buffers hold them."""
        return obs_tree.concatenate([g.buffers.obs for g in self._groups])

    def _batched(self, envs: Sequence[int], infos: Sequence[dict]) -> Callable[[], dict]:
        """Builds Gymnasium's vector infos from the infos of `envs`, decoding them then."""
        return lambda: vector_infos.vector(infos, envs, self.num_envs, self._add_info)

    def _expect_open(self) -> None:
        if self.closed:
            raise gym.error.ClosedEnvironmentError("this BatchEnv is closed")


def _is_group(value: Any) -> bool:
    """Whether `value` is a group of envs: a `Group`, which has its buffers."""
    return isinstance(getattr(value, "buffers", None), stepper.Buffers)

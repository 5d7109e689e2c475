"""EnvStepper: a few envs stepped in sequence, reading actions from and writing results to arrays.

The same loop runs inside a worker process (over shared memory) and in the parent
(over plain arrays), so local and external batches step envs identically.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl import env_spec
from batchrl.envs import spaces
from batchrl.envs.host import actions as actions_lib
from batchrl.envs.host import autoreset as autoreset_lib
from batchrl.envs.host import env_checks, errors, forwarding, lifecycle, make
from batchrl.envs.host import infos as infos_lib

logger = logging.getLogger("batchrl.envs")

_ALIGN = 64

# The byte that rings a worker to step, by what happens to envs whose episode ended:
# DISABLED, a plain step (the caller resets); NEXT_STEP, they are reset in place of the
# next step; SAME_STEP, they are reset at once, the final obs and info kept in the info.
STEP_BYTES = {
    AutoresetMode.DISABLED: b"s",
    AutoresetMode.NEXT_STEP: b"n",
    AutoresetMode.SAME_STEP: b"f",
}
# The same, for a step whose infos the caller reads at once: the worker sends them after
# its answer, which saves asking for them.
READ_BYTES = {mode: byte.upper() for mode, byte in STEP_BYTES.items()}
# Each ring's autoreset mode and whether its infos are sent.
RINGS = {byte: (mode, False) for mode, byte in STEP_BYTES.items()}
RINGS |= {byte: (mode, True) for mode, byte in READ_BYTES.items()}
# The byte a worker answers a step with, by whether any of its envs' infos holds anything:
# a step whose infos are all empty (Pendulum's, CartPole's) has none to fetch.
ANSWERS = {True: b"a", False: b"e"}
SENT = b"i"  # The answer to a step whose infos the worker sends next, on the command pipe.


@dataclasses.dataclass(frozen=True)
class Buffers:
    """Arrays one group reads actions from and writes results to. Leading axis: env in group.

    `obs` is a tree of arrays as Gymnasium batches the observation space (`obs_tree`),
    each leaf in the space's dtype; a flat `Box` is one array.
    """

    action: Any  # A tree of [k, *leaf_shape] as the action space nests; a flat space's is one.
    obs: Any  # A tree of [k, *leaf_shape], one per leaf of the observation space.
    reward: np.ndarray  # [k] float64
    terminated: np.ndarray  # [k] bool
    truncated: np.ndarray  # [k] bool

    @staticmethod
    def layout(
        num_envs: int, observation_space: gym.Space, action_space: gym.Space
    ) -> tuple[dict[str, Any], int]:
        """Where each array lies: a `_Slot` per field (a tree of them for `obs`), total bytes.

        Each array starts on a cache line; the order is fixed by the spaces alone, so a
        parent and its worker lay out one buffer identically.
        """
        end = 0

        def place(leaf: Any) -> _Slot | _Objects:
            nonlocal end
            if isinstance(leaf, spaces.Variable):  # No fixed size: in each process's memory.
                return _Objects(num_envs)
            slot = _Slot(_aligned(end), (num_envs, *leaf.shape), np.dtype(leaf.dtype))
            end = slot.offset + slot.nbytes
            return slot

        observation = spaces.observation_tree(observation_space, variable=True)
        slots = {
            "action": env_spec.map_tree(place, spaces.action_tree(action_space, variable=True)),
            "obs": env_spec.map_tree(place, observation),
            "reward": place(_Scalar(np.float64)),
            "terminated": place(_Scalar(np.bool_)),
            "truncated": place(_Scalar(np.bool_)),
        }
        return slots, max(_aligned(end), _ALIGN)

    @classmethod
    def nbytes(cls, num_envs: int, observation_space: gym.Space, action_space: gym.Space) -> int:
        """Bytes needed to hold all arrays, each aligned to a cache line."""
        return cls.layout(num_envs, observation_space, action_space)[1]

    @classmethod
    def over(
        cls,
        buffer: Any,
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
    ) -> Buffers:
        """Views into `buffer` (bytes-like, writable), laid out identically in every process."""
        slots, _ = cls.layout(num_envs, observation_space, action_space)
        return cls(
            **{
                name: env_spec.map_tree(lambda slot: slot.view(buffer), tree)
                for name, tree in slots.items()
            }
        )

    @classmethod
    def allocate(
        cls, num_envs: int, observation_space: gym.Space, action_space: gym.Space
    ) -> Buffers:
        """Buffers in ordinary process memory."""
        nbytes = cls.nbytes(num_envs, observation_space, action_space)
        return cls.over(bytearray(nbytes), num_envs, observation_space, action_space)


@dataclasses.dataclass(frozen=True)
class _Slot:
    """Where one array lies in a buffer."""

    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def view(self, buffer: Any) -> np.ndarray:
        count = math.prod(self.shape)
        return np.frombuffer(buffer, self.dtype, count, self.offset).reshape(self.shape)


@dataclasses.dataclass(frozen=True)
class _Scalar:
    """A leaf of one number an env (reward, terminated, truncated), as `layout` places leaves."""

    dtype: Any
    shape: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Objects:
    """A leaf of no fixed size (`spaces.Variable`): an object array in each process's memory.

    Its values cross between processes in the messages of a step and a reset (`objects`).
    """

    num_envs: int

    def view(self, buffer: Any) -> np.ndarray:
        del buffer
        return np.empty(self.num_envs, object)


def objects(tree: Any) -> list[np.ndarray]:
    """The object arrays of a tree of buffers (its leaves of no fixed size), in tree order."""
    found: list[np.ndarray] = []
    env_spec.map_tree(lambda leaf: found.append(leaf) if leaf.dtype == object else None, tree)
    return found


def put_objects(tree: Any, values: list[np.ndarray], index: Any = Ellipsis) -> None:
    """Writes `values` (as `objects` lists them) into rows `index` of the tree's object arrays."""
    for target, value in zip(objects(tree), values, strict=True):
        target[index] = value


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


class EnvStepper(forwarding.EnvForwarding):
    """Owns k envs that share spaces; steps them in sequence over `Buffers`.

    Autoresets as Gymnasium's `SyncVectorEnv` does, env by env (`autoreset`), so a batch
    behaves as Gymnasium's vector envs do without a second round trip for the resets.
    """

    def __init__(
        self,
        constructors: Sequence[Callable[[], gym.Env]],
        observation_mode: Any = "same",
        first_index: int = 0,  # The first env's place in its batch, as errors name it.
    ):
        self.envs: list[gym.Env] = []
        self._closed = False
        try:  # Envs built before one fails, or before their spaces are refused, are closed.
            for constructor in constructors:  # A str or a vector env: one line, not its close.
                name = lifecycle.constructor_name(constructor)
                self.envs.append(make.checked(constructor(), name))
            first = self.envs[0]
            self.name = spaces.env_name(first)
            self.observation_space = first.observation_space
            self.action_space = first.action_space
            spaces.action_tree(self.action_space, self.name, variable=True)  # Refuses the rest.
            self._observation = spaces.observation_tree(
                self.observation_space, self.name, variable=True
            )
            for index, env in enumerate(self.envs[1:], first_index + 1):
                env_checks.same_spaces(
                    f"{self.name} (env {first_index})",
                    first,
                    f"{spaces.env_name(env)} (env {index})",
                    env,
                    observation_mode,
                )
            # observation_mode="different": each env checked by its own space's bounds.
            trees = [spaces.observation_tree(e.observation_space, variable=True) for e in self.envs]
            self._own_trees = None if all(t == trees[0] for t in trees) else trees
        except BaseException:
            self.close()
            raise
        self.buffers: Buffers | None = None
        self._autoreset = autoreset_lib.Autoreset(len(self.envs))

    def step(
        self, autoreset: AutoresetMode = AutoresetMode.DISABLED, given: Any = None
    ) -> list[dict]:
        """Steps every env with its action from the buffers (or `given`'s); returns their infos.

        Each env gets its own copy of its action (an env may keep it), and the results
        are written to the buffers once for all envs, which is several times cheaper.
        `given`: the actions in the dtypes the caller gave them (`actions.as_given`).
        """
        buffers = self.buffers
        actions = actions_lib.per_env(buffers.action if given is None else given, len(self.envs))
        due = self._autoreset.due(autoreset)
        results = []
        try:
            if due is not None:
                for env, a, reset in zip(self.envs, actions, due, strict=True):
                    results.append(self._reset_for_step(env) if reset else env.step(a))
            else:
                for env, a in zip(self.envs, actions, strict=True):
                    results.append(env.step(a))
            obs, reward, terminated, truncated, infos = map(list, zip(*results, strict=True))
        except BaseException as error:
            said = env_checks.step_error(error, results, len(self.envs), self.name)
            if len(results) < len(self.envs):  # The env that raised: the first of no result.
                errors.mark_env(said or error, len(results))
            if said is None:
                raise
            raise said from None
        # Written first: a flag that is not one bool is named before the autoreset reads it.
        for field, values in (
            ("reward", reward),
            ("terminated", terminated),
            ("truncated", truncated),
        ):
            env_checks.write_scalars(getattr(buffers, field), values, field, self.name)
        ended = self._autoreset.stepped(autoreset, buffers.terminated, buffers.truncated)
        for i in ended:
            # Copies, taken before the reset: an env may reuse its arrays (MuJoCo's infos
            # are views of its data, which the reset rewrites), and the infos may be read
            # steps later.
            final_obs, final_info = copy.deepcopy(obs[i]), copy.deepcopy(infos[i])
            obs[i], reset_info = self._reset(i)
            infos[i] = autoreset_lib.final(final_obs, final_info, reset_info)
        self._write_obs(slice(None), obs)
        return env_checks.owned_infos(infos, self.name)

    def _reset_for_step(self, env: gym.Env) -> tuple:
        obs, info = env_checks.reset(env, self.name)
        return obs, 0.0, False, False, info

    def reset(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> list[dict]:
        """Resets the envs at `indices` (positions in this group); writes obs to the buffers."""
        infos = []
        for i, seed in zip(indices, seeds, strict=True):
            obs, info = self._reset(i, seed=seed, options=options)
            self._write_obs(i, obs)
            infos.append(infos_lib.owned(info))
        self._autoreset.reset(list(indices))
        return infos

    def _reset(self, index: int, **kwargs: Any) -> tuple[Any, dict]:
        try:
            return env_checks.reset(self.envs[index], self.name, **kwargs)
        except BaseException as error:
            errors.mark_env(error, index)
            raise

    def _env(self, index: int) -> gym.Env:
        return self.envs[index]

    def close(self) -> None:
        """Closes every env once; an env that fails to close does not stop the others.

        A worker closes its envs on the parent's command and again as it exits, which must
        not call an env's `close` twice (Gymnasium's vector envs call it once). One that
        raises is said in a warning, as the env built to read a run's spaces is.
        """
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            try:
                env.close()
            except Exception as error:  # The others still close.
                name = spaces.env_name(env)
                logger.warning("env %s raised %s in close(): %s", name, type(error).__name__, error)

    def _write_obs(self, where: int | slice, obs: Any) -> None:
        """Writes one env's observation (`where` an index) or a list of all (`where` a slice)."""
        observations = obs if isinstance(where, slice) else [obs]
        if self._own_trees is None:
            self._write_leaves(self.buffers.obs, where, observations, self._observation, "obs")
            return
        rows = range(len(self.envs))[where] if isinstance(where, slice) else [where]
        for row, one in zip(rows, observations, strict=True):
            self._write_leaves(self.buffers.obs, row, [one], self._own_trees[row], "obs")

    def _write_leaves(
        self, target: Any, where: int | slice, observations: list, tree: Any, path: str
    ) -> None:
        """Writes each leaf of `observations` (one per env written) at `where` in `target`.

        `tree` is the observation's tree of `ObsLeaf`; an observation that does not fit it
        is named by the path of the first leaf that does not.
        """
        if isinstance(tree, dict | tuple):
            keys = list(tree) if isinstance(tree, dict) else range(len(tree))
            for key in keys:
                name = env_spec.key_path(key) if isinstance(tree, dict) else f"[{key}]"
                try:
                    parts = [
                        env_checks.part(o, key, tree, path + name, self.name) for o in observations
                    ]
                except ValueError as error:  # Marked with the env that returned it.
                    index = next(
                        i for i, o in enumerate(observations) if not env_checks.holds(o, key, tree)
                    )
                    raise errors.marked(error, where if isinstance(where, int) else index) from None
                self._write_leaves(target[key], where, parts, tree[key], path + name)
            return
        if isinstance(tree, spaces.Variable):
            rows = range(len(target))[where] if isinstance(where, slice) else [where]
            for row, value in zip(rows, observations, strict=True):
                target[row] = value
            return
        expected = (len(observations), *tree.shape) if isinstance(where, slice) else tree.shape
        try:
            array = np.asarray(observations if isinstance(where, slice) else observations[0])
        except ValueError:  # Observations of different shapes.
            array = None
        if array is None or array.shape != expected:
            env_checks.refuse_observation(
                self.name, where, observations, tree, target.dtype, path, "shape"
            )
        if array.dtype != target.dtype and not np.can_cast(array.dtype, target.dtype, "same_kind"):
            env_checks.refuse_observation(
                self.name, where, observations, tree, target.dtype, path, "dtype"
            )
        outside = spaces.outside_space(tree, array) if tree.kind in spaces.COUNTED else None
        if outside is not None:
            env_checks.refuse_observation(
                self.name, where, observations, tree, target.dtype, path, "values"
            )
        target[where] = array

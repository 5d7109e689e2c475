"""Policy: a trained policy acting on NumPy observations in its env's own spaces.

`load(rundir)` reads a run folder's config, env spec and checkpoint (the agent's
`learner`, all that acting reads), never its env, and returns a `Policy`. `act(obs)`
takes one env's observation or a batch: a tree like the env's observation space (a
`Dict` as a dict, a `Tuple` as a tuple), each leaf [*leaf.shape] for one env or
[N, *leaf.shape] for N, as Gymnasium's vector envs give them, told apart by the leaves'
ranks against the saved spec. It returns the action in the env's action space: float32
[*action_shape] for a `Box`, a NumPy integer for a `Discrete`, int64 [*shape] for a
`MultiDiscrete`, a tree of its leaves' dtypes for a `Dict`, `Tuple`, `MultiBinary`
or a space of another dtype (a `Box` of bools, a `Discrete` of int32), with a leading
[N] for a batch. `deterministic=True` takes the mode of the policy's distribution, as
evaluation does (unless the run's config sets `eval_sample`); False samples, as
training does.

A recurrent policy keeps each env's carry from one call to the next, as the envs step
on: call `reset()` when every env starts an episode (or `reset(mask)` for some of them);
a call with another number of envs starts them all afresh, with a warning. `predict`
takes and returns the carry instead, as Stable-Baselines3's recurrent policies do. A
policy pickles with its key and carries, so it acts in another process as it would here.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import env_spec as env_spec_lib
from batchrl.configs import TrainConfig, train_config
from batchrl.envs import spaces
from batchrl.training import checkpoint, run_folder

logger = logging.getLogger("batchrl.training")

LEARNER = ("agent", "learner")  # Where the policy sits in a checkpoint's `loop.RunState`.


class Policy:
    """A trained policy: static networks and the learner acting reads; `act` on NumPy."""

    def __init__(
        self,
        algorithm: algorithm_lib.Algorithm,
        networks: algorithm_lib.Networks,
        learner: algorithm_lib.Learner,
        seed: int = 0,
    ):
        self._algorithm, self._networks, self._learner = algorithm, networks, learner
        self._key = jax.random.key(seed)
        self._acting = None  # The acting state of the envs of the last call.
        self._agents = {
            True: algorithm.evaluation_agent(networks),
            False: algorithm.sampling_agent(networks),
        }
        self._perform = {mode: _performs(agent) for mode, agent in self._agents.items()}
        self._begin = jax.jit(self._agents[True].begin_episode)
        # One program a batch size, compiled once: a new size each call must not recompile.
        self._start = jax.jit(
            lambda learner, size: algorithm.acting(networks, learner, size), static_argnums=1
        )

    def __getstate__(self) -> dict[str, Any]:
        """What it acts from, as host arrays: its key and its envs' acting state too.

        So a policy pickles, to another process (multiprocessing, Ray) or a file, and loads
        where the run's device is not; its compiled functions are built again there.
        """
        return {
            "algorithm": self._algorithm,
            "networks": self._networks,
            "learner": jax.device_get(self._learner),
            "key": (jax.random.key_impl(self._key), np.asarray(jax.random.key_data(self._key))),
            "acting": jax.device_get(self._acting),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        learner = jax.tree.map(jnp.asarray, state["learner"])
        self.__init__(state["algorithm"], state["networks"], learner)
        impl, data = state["key"]
        self._key = jax.random.wrap_key_data(data, impl=impl)
        self._acting = jax.tree.map(jnp.asarray, state["acting"])  # None stays None.

    @property
    def env_spec(self) -> env_spec_lib.EnvSpec:
        """The env's spaces as the policy reads them."""
        return self._networks.env_spec

    @property
    def learner(self) -> algorithm_lib.Learner:
        """What acting reads: parameters and normalisers."""
        return self._learner

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """The action for one env's observation, or actions [N, ...] for a batch of N."""
        if not isinstance(deterministic, bool | np.bool_):  # "False" took the mean action.
            raise ValueError(f"deterministic is True or False, got {deterministic!r}")
        batch, single = _batch(self.env_spec.observation, obs)
        self._ready(jax.tree.leaves(batch)[0].shape[0])
        perform = self._perform[bool(deterministic)]
        self._acting, action, key = perform(self._acting, batch, self._key)
        if not deterministic:  # The mode draws nothing: samples do not depend on its calls.
            self._key = key
        if self.env_spec.action is not None:  # A tree: each leaf in the dtype its space has.
            dtypes = env_spec_lib.map_tree(lambda leaf: leaf.dtype, self.env_spec.action)
            action = env_spec_lib.map_tree(_host_action, dtypes, action)
        else:
            action = _host_action(np.int64 if self.env_spec.discrete else None, action)
        return jax.tree.map(lambda leaf: leaf[0], action) if single else action

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
    ) -> tuple[Any, Any]:
        """`act` as Stable-Baselines3's `model.predict` is called: (action, state).

        So SB3's tools run a batchrl policy (`evaluate_policy(policy, env)`). A feed-forward
        policy reads no `state` and returns None. A recurrent one's `state` is each env's
        carry, [N, H] ([H] for one env), as SB3's RecurrentPPO takes its LSTM states:
        None starts every env afresh, and the carry after the step comes back to pass in
        next time, so two loops of envs keep their own; `episode_start` [N] starts those
        envs' episodes first. `deterministic` is False by default, as in SB3.
        """
        if not self._networks.recurrent:
            return self.act(observation, deterministic), None
        batch, single = _batch(self.env_spec.observation, observation)
        size = jax.tree.leaves(batch)[0].shape[0]
        self._ready(size, said=False)  # The carry comes from `state`, whatever the size.
        carry = self._acting.running.carry
        if state is None:
            self._acting = self._begin(self._acting, jnp.ones(size, bool))
        else:
            given = np.asarray(state, np.float32)
            given = given[None] if single and given.ndim == carry.ndim - 1 else given
            if given.shape != carry.shape:
                want = carry.shape[1:] if single else carry.shape
                raise ValueError(f"state has shape {np.shape(state)}: this policy's is {want}")
            running = self._acting.running.replace(carry=jnp.asarray(given))
            self._acting = self._acting.replace(running=running)
        if episode_start is not None:
            starts = np.asarray(episode_start, bool)
            if starts.size != size:  # Its reset was skipped, and the carry went on.
                raise ValueError(
                    f"episode_start has shape {starts.shape}: the policy acts on {size} envs"
                )
            self.reset(starts.reshape(size))
        action = self.act(observation, deterministic)
        carry = np.array(self._acting.running.carry)
        return action, carry[0] if single else carry

    def _ready(self, size: int, said: bool = True) -> None:
        """An acting state for `size` envs: the last call's, or every env's afresh.

        `said`: a recurrent policy's carries started afresh are a warning.
        """
        if self._acting is not None and _num_envs(self._acting) == size:
            return
        if said and self._acting is not None and self._networks.recurrent:
            logger.warning(
                "a recurrent policy acted on %d envs and now on %d: every env's carry starts "
                "afresh (predict(obs, state) keeps each env's)",
                _num_envs(self._acting),
                size,
            )
        self._acting = self._start(self._learner, size)  # One program, not an op each.

    def reset(self, mask: Any = None) -> None:
        """Starts the episodes of every env, or of those `mask` [N] marks (a recurrent policy)."""
        if self._acting is None:
            return
        size = _num_envs(self._acting)
        raw = np.ones(size, bool) if mask is None else np.asarray(mask)
        if raw.size != size:
            raise ValueError(f"reset's mask has shape {raw.shape}: the policy acts on {size} envs")
        other = raw[~np.isin(raw, (0, 1))] if raw.dtype != bool else ()
        if len(other):  # 2 was read as True.
            raise ValueError(f"reset's mask holds {other[0].item()!r}: True/False or 1/0 only")
        mask = raw.astype(bool).reshape(size)
        self._acting = self._begin(self._acting, jnp.asarray(mask))


def _performs(agent: Any) -> Callable[[Any, Any, jax.Array], tuple[Any, Any, jax.Array]]:
    """`agent.perform` with its key split off the policy's, in one program.

    Returns (acting, action, the policy's next key).
    """

    def perform(acting: Any, obs: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        key, step_key = jax.random.split(key)
        acting, action, _ = agent.perform(acting, obs, step_key)
        return acting, action, key

    return jax.jit(perform)


def load(rundir: str | os.PathLike, *, best: bool = False, seed: int | None = None) -> Policy:
    """The policy of the run in `rundir`: its newest good checkpoint, or with `best` its best.

    Sampled actions draw from a key of `seed`, by default the run's own. Reads the run's
    config, its env spec and the checkpoint's learner, and builds no env (a folder written
    before runs kept their spec builds one, in this process, to read it). One-line errors:
    `run_folder.RunFolderError` for a missing folder, config or checkpoint,
    `checkpoint.CheckpointError` for a checkpoint that does not load.
    """
    if rundir is None:  # `run.rundir` of a run trained with logdir=None.
        raise run_folder.RunFolderError(
            "rundir is None: a run trained with logdir=None has no folder; its `run.policy` "
            "is the policy"
        )
    if not isinstance(best, bool | np.bool_):  # "False", from a flag or a file, was true.
        raise ValueError(f"best is True or False, got {best!r}")
    rundir = pathlib.Path(rundir)
    config = run_folder.read_config(rundir)
    if seed is not None:  # Checked as a run's seed is.
        config = train_config.replace(config, seed=seed)
    directory = run_folder.checkpoints(rundir)
    path = run_folder.best(rundir) if best else None
    if not best and not checkpoint.steps(directory):
        raise run_folder.RunFolderError(f"run folder {str(rundir)!r} has no checkpoint yet")
    spec = run_folder.read_spec(rundir)
    if spec is None:
        from batchrl.training import environments  # Old folders only: imports every env kind.

        spec = environments.check_env(config)
    algorithm = algorithm_lib.of(config.algorithm)
    networks = algorithm.networks(config.algorithm, spec)
    target = _learner_example(algorithm, networks, config)
    if path is not None:
        learner = checkpoint.load(path, target, LEARNER)
    else:
        learner = checkpoint.load_latest(directory, target, LEARNER)[1]
    return Policy(algorithm, networks, learner, seed=config.seed)


def _learner_example(
    algorithm: algorithm_lib.Algorithm, networks: algorithm_lib.Networks, config: TrainConfig
) -> algorithm_lib.Learner:
    """A learner of the run's structure, shapes and dtypes, for the checkpoint to fill.

    Traced, not compiled (compiling the networks' init took 2.2 s of a 2.5 s load of
    `pendulum_jax`): zeros of the traced shapes and dtypes (random keys of zero data),
    which `checkpoint.load` replaces, values and all.
    """
    shapes = algorithm_lib.init_shapes(algorithm, networks, config.shape)
    return algorithm_lib.zeros(shapes.learner)  # No storage made beside it.


def _num_envs(acting: Any) -> int:
    return jax.tree.leaves(acting.running)[0].shape[0]


def _host_action(dtype: Any, action: Any) -> np.ndarray:
    """An action leaf as NumPy, in `dtype` (compiled code holds int64 as int32) if given.

    A copy, not a view of JAX's read-only buffer: the caller's to change (noise added in
    place, `np.clip(..., out=action)`), as SB3's `predict` and `action_space.sample` give.
    """
    action = np.array(action)
    return action if dtype is None else action.astype(dtype, copy=False)


def _batch(observation: Any, obs: Any) -> tuple[Any, bool]:
    """`obs` as a batch of leaves [N, *leaf.shape] in compiled dtypes, and whether it was one env.

    Raises:
        ValueError: naming the first leaf whose shape is neither one env's nor a batch's,
            a leaf that is no array of numbers, or a tree that is not the spec's.
    """
    arrays = _arrays(observation, obs)
    pairs = zip(env_spec_lib.leaf_paths(observation), env_spec_lib.leaves(arrays), strict=True)
    single, size = None, None
    for (path, leaf), array in pairs:
        if array.shape == leaf.shape and single is not False:
            single, count = True, 1
        elif array.ndim and array.shape[1:] == leaf.shape and single is not True:
            single, count = False, array.shape[0]
        elif single is not None and leaf.shape in (array.shape, array.shape[1:]):
            made = f"a batch of {size}" if single is False else "one env's"
            raise ValueError(
                f"{path} has shape {array.shape}, but the leaves before it make {made}: "
                f"every leaf is one env's ({leaf.shape}) or every leaf a batch's"
            )
        else:
            raise ValueError(
                f"{path} has shape {array.shape}: expected {leaf.shape} for one env, or "
                f"[N, *{leaf.shape}] for a batch, as every leaf"
            )
        if size not in (None, count):
            raise ValueError(f"{path} holds {count} envs, other leaves {size}")
        size = count
        _check_values(path, leaf, array)
    if size == 0:
        raise ValueError("a batch of observations holds at least one, got 0")

    def batched(leaf: env_spec_lib.ObsLeaf, array: np.ndarray) -> np.ndarray:
        dtype = jax.dtypes.canonicalize_dtype(np.dtype(leaf.dtype))
        return (array[None] if single else array).astype(dtype)

    return env_spec_lib.map_tree(batched, observation, arrays), bool(single)


def _arrays(spec: Any, obs: Any, path: str = "obs") -> Any:
    """`obs` as a tree like `spec` of NumPy arrays (extra keys dropped).

    Raises:
        ValueError: one line naming where `obs` is not a tree like `spec`, or a leaf that
            is no array of numbers (a dict, a string, `env.reset()`'s (obs, info)).
    """
    if isinstance(spec, dict):
        if not isinstance(obs, Mapping):
            got = f"{_described(obs)}{_hint(obs)}"
            raise ValueError(f"{path} is a dict of keys {list(spec)}, got {got}")
        missing = [key for key in spec if key not in obs]
        if missing:
            raise ValueError(f"{path} lacks key {missing[0]!r}: the space's keys are {list(spec)}")
        return {
            key: _arrays(child, obs[key], path + env_spec_lib.key_path(key))
            for key, child in spec.items()
        }
    if isinstance(spec, tuple | list):
        if not isinstance(obs, tuple | list) or len(obs) != len(spec):
            got = f"{_described(obs)}{_hint(obs)}"
            raise ValueError(f"{path} is a tuple of {len(spec)} items, got {got}")
        if isinstance(obs, list) and all(isinstance(item, tuple) for item in obs):
            # Read as one observation, a list of N observations became a batch of N of its
            # first item's leaves, envs and items crossed.
            raise ValueError(
                f"{path} is {_described(obs)} of tuples: one observation is one tuple, a "
                f"batch one tuple of [N, ...] arrays, as a vector env gives them"
            )
        return tuple(_arrays(child, obs[i], f"{path}[{i}]") for i, child in enumerate(spec))
    try:
        array = np.asarray(obs)
    except ValueError:  # NumPy's "inhomogeneous shape": items of different shapes.
        raise ValueError(
            f"{path} is {_described(obs)} that make no array: expected {_leaf_said(spec)}"
            f"{_hint(obs)}"
        ) from None
    if array.dtype.kind not in "biuf":
        what = f"an array of {array.dtype}" if isinstance(obs, np.ndarray) else _described(obs)
        raise ValueError(f"{path} is {what}: expected {_leaf_said(spec)}{_hint(obs)}")
    return array


def _leaf_said(leaf: env_spec_lib.ObsLeaf) -> str:
    return f"{leaf.dtype} {leaf.shape} for one env, or [N, *{leaf.shape}] for a batch"


def _described(obs: Any) -> str:
    """What `obs` is, in a few words: `a dict`, `a tuple of 2 items`."""
    if isinstance(obs, tuple | list):
        return f"a {type(obs).__name__} of {len(obs)} items"
    return "None" if obs is None else f"a {type(obs).__name__}"


def _hint(obs: Any) -> str:
    """What to give instead: a batch of trees as one tree, or `env.reset()`'s obs alone."""
    if isinstance(obs, list) and obs and all(isinstance(item, Mapping) for item in obs):
        return "; a batch is one dict of [N, ...] arrays, as a vector env gives them"
    if isinstance(obs, tuple | list) and obs and isinstance(obs[-1], Mapping):
        return "; env.reset() returns (obs, info) and env.step() five values: give their obs"
    return ""


def _check_values(path: str, leaf: env_spec_lib.ObsLeaf, array: np.ndarray) -> None:
    """A one-line ValueError for a value its leaf's space or integer dtype does not hold.

    Cast unchecked, a frame scaled to [0, 1] became a black uint8 frame, and 256 a 0. A
    NaN, which no env's space holds and training stops on, gave NaN actions.
    """
    if not array.size:
        return
    if array.dtype.kind == "f" and np.isnan(array).any():
        raise ValueError(
            f"{path} holds nan: no observation space holds it, and its action would be nan"
        )
    outside = spaces.outside_space(leaf, array)
    if outside is not None:
        raise ValueError(f"{path} {outside}")
    dtype = np.dtype(leaf.dtype)
    if leaf.kind in spaces.COUNTED or dtype.kind not in "iu" or array.dtype.kind not in "iuf":
        return
    info = np.iinfo(dtype)
    # The policy's dtype, as compiled code takes it.
    allowed = f"this leaf takes {dtype} values, {info.min} to {info.max}"
    if array.dtype.kind == "f":  # As Gymnasium's Box.contains refuses it.
        raise ValueError(f"{path} is {array.dtype}: {allowed} (not scaled)")
    bad = (array < info.min) | (array > info.max)
    if np.any(bad):
        raise ValueError(f"{path} holds {array[bad][0].item()!r}: {allowed}")

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
policy pickles with its key and carries, so it acts in another process as it would here
(one started by `spawn` or `forkserver`: a child forked from a process where JAX ran hangs
in JAX's threads, and is refused in one line). Threads may share a policy: its calls take
turns, each sampled action drawn from a key of its own.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import env_spec as env_spec_lib
from batchrl.configs import TrainConfig, train_config
from batchrl.envs import space_data
from batchrl.training import checkpoint, policy_obs, run_folder, session

logger = logging.getLogger("batchrl.training")

LEARNER = ("agent", "learner")  # Where the policy sits in a checkpoint's `loop.RunState`.
_forked = [False]  # Whether this process was forked from one where a policy was made.
_made = [False]  # Whether a policy was made in this process (JAX's threads started).


def _note_fork() -> None:
    _forked[0] = _made[0]


os.register_at_fork(after_in_child=_note_fork)


class Policy:
    """A trained policy: static networks and the learner acting reads; `act` on NumPy."""

    def __init__(
        self,
        algorithm: algorithm_lib.Algorithm,
        networks: algorithm_lib.Networks,
        learner: algorithm_lib.Learner,
        seed: int = 0,
        config: TrainConfig | None = None,
    ):
        _check_not_forked()
        _made[0] = True
        self._algorithm, self._networks, self._learner = algorithm, networks, learner
        self._config = config
        self._lock = threading.RLock()  # Threads' calls take turns: each reads and sets the key.
        self._key = jax.random.key(seed)
        self._acting = None  # The acting state of the envs of the last call.
        self._predicting = None  # `predict`'s, apart.
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
            "config": self._config,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        if _forked[0]:  # Raised at its first call: raised here, a pool's task was lost unsaid.
            return
        learner = jax.tree.map(jnp.asarray, state["learner"])
        self.__init__(state["algorithm"], state["networks"], learner, config=state.get("config"))
        impl, data = state["key"]
        self._key = jax.random.wrap_key_data(data, impl=impl)
        self._acting = jax.tree.map(jnp.asarray, state["acting"])  # None stays None.

    @property
    def env_spec(self) -> env_spec_lib.EnvSpec:
        """The env's spaces as the policy reads them."""
        return self._networks.env_spec

    @property
    def observation_space(self) -> gym.Space | None:
        """The env's observation space, as Gymnasium gives it: what `act` takes, one env's.

        As Stable-Baselines3's `model.observation_space`. None for an env without
        Gymnasium spaces (a JAX-native env of one's own), and a folder written before
        runs kept them.
        """
        spaces = self._networks.env_spec.spaces
        return None if spaces is None else spaces[0]

    @property
    def action_space(self) -> gym.Space | None:
        """The env's action space, as Gymnasium gives it: what `act` returns, one env's."""
        spaces = self._networks.env_spec.spaces
        return None if spaces is None else spaces[1]

    @property
    def learner(self) -> algorithm_lib.Learner:
        """What acting reads: parameters and normalisers."""
        return self._learner

    @property
    def config(self) -> TrainConfig | None:
        """The run's config: how its evaluation acted (`eval_sample`), its env, `max_length`.

        None for a policy made without one (`run.policy` of a run in memory has its own).
        """
        return self._config

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """The action for one env's observation, or actions [N, ...] for a batch of N."""
        if not isinstance(deterministic, bool | np.bool_):  # "False" took the mean action.
            raise ValueError(f"deterministic is True or False, got {deterministic!r}")
        _check_not_forked()
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(obs)):
            raise TypeError(
                "policy.act takes NumPy observations and runs a compiled program of its own: "
                "call it outside jax.jit and jax.vmap"
            )
        batch, single = policy_obs.as_batch(self.env_spec.observation, obs)
        with self._lock:  # Two threads read one key and drew the same samples.
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
        next time, so two loops of envs keep their own, apart from those `act` keeps;
        `episode_start` [N] starts those envs' episodes first. `deterministic` is False by
        default, as in SB3.
        """
        _check_not_forked()
        if not self._networks.recurrent:
            return self.act(observation, deterministic), None
        with self._lock:  # The carry set, then acted from: one call's at a time.
            # Its own acting state, not `act`'s: a loop of `act` between `predict`s went on
            # from the state the last `predict` was given, another env's.
            kept, self._acting = self._acting, self._predicting
            try:
                return self._predict(observation, state, episode_start, deterministic)
            finally:
                self._predicting, self._acting = self._acting, kept

    def _predict(
        self, observation: Any, state: Any, episode_start: Any, deterministic: bool
    ) -> tuple[Any, Any]:
        """A recurrent policy's `predict`, acting from the state `predict` keeps."""
        batch, single = policy_obs.as_batch(self.env_spec.observation, observation)
        size = jax.tree.leaves(batch)[0].shape[0]
        self._ready(size, said=False)  # The carry comes from `state`, whatever the size.
        carry = self._acting.running.carry
        if state is None:
            self._acting = self._begin(self._acting, jnp.ones(size, bool))
        else:
            given = policy_obs.carry(state, carry.shape, single)
            running = self._acting.running.replace(carry=jnp.asarray(given))
            self._acting = self._acting.replace(running=running)
        if episode_start is not None:
            starts = policy_obs.flags(episode_start, "episode_start")
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
                "a recurrent policy acted on %d env(s) and now on %d: every env's carry starts "
                "afresh (predict(obs, state) keeps each env's)",
                _num_envs(self._acting),
                size,
            )
        self._acting = self._start(self._learner, size)  # One program, not an op each.

    def reset(self, mask: Any = None) -> None:
        """Starts the episodes of every env, or of those `mask` [N] marks (a recurrent policy)."""
        _check_not_forked()
        raw = np.ones(1, bool) if mask is None else policy_obs.flags(mask, "reset's mask")
        if self._acting is None:  # Every env starts afresh at the first act.
            return
        size = _num_envs(self._acting)
        raw = np.ones(size, bool) if mask is None else raw
        if raw.size != size:
            raise ValueError(f"reset's mask has shape {raw.shape}: the policy acts on {size} envs")
        mask = raw.reshape(size)
        with self._lock:
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

    `rundir` may also name one checkpoint file of a run's `checkpoints` folder, to load that
    phase's policy. Sampled actions draw from a key of `seed`, by default the run's own.
    Reads the run's config, env spec, spaces and the checkpoint's learner, and builds no env
    (a folder written before runs kept their spec builds one, in this process, to read it).
    One-line errors: `run_folder.RunFolderError` for a missing folder, config or checkpoint
    (or a config edited since), `checkpoint.CheckpointError` for one that does not load.
    """
    if not isinstance(rundir, str | os.PathLike):  # None: a logdir=None run's `run.rundir`.
        none = "a run trained with logdir=None has no folder; its `run.policy` is the policy"
        path = f"rundir is a run folder's or a checkpoint's path; got {rundir!r}"
        raise run_folder.RunFolderError(f"rundir is None: {none}" if rundir is None else path)
    if not isinstance(best, bool | np.bool_):  # "False", from a flag or a file, was true.
        raise ValueError(f"best is True or False, got {best!r}")
    _check_not_forked()
    rundir, path = _checkpoint_file(pathlib.Path(rundir), best)
    config = read = run_folder.read_config(rundir)
    if seed is not None:  # Checked as a run's seed is.
        config = train_config.replace(config, seed=seed)
    directory = run_folder.checkpoints(rundir)
    path = run_folder.best(rundir) if best else path
    if path is None and not checkpoint.steps(directory):
        raise run_folder.RunFolderError(f"run folder {str(rundir)!r} has no checkpoint yet")
    spec = run_folder.read_spec(rundir)
    if spec is None:
        from batchrl.training import environments  # Old folders only: imports every env kind.

        spec = environments.check_env(config)
    else:
        spec = dataclasses.replace(spec, spaces=_spaces(rundir))
    algorithm = algorithm_lib.of(config.algorithm)
    networks = algorithm.networks(config.algorithm, spec)
    target = _learner_example(algorithm, networks, config)
    with session.edits_named(rundir, read):
        if path is not None:
            learner = checkpoint.load(path, target, LEARNER)
        else:
            learner = checkpoint.load_latest(directory, target, LEARNER)[1]
    return Policy(algorithm, networks, learner, seed=config.seed, config=config)


def _spaces(rundir: pathlib.Path) -> tuple[gym.Space, gym.Space] | None:
    """The env's Gymnasium spaces the run kept; None where it kept none."""
    data = run_folder.read_spaces(rundir)
    try:
        return None if data is None else space_data.pair_from_data(data)
    except ValueError as error:
        path = str(rundir / run_folder.SPACES)
        raise run_folder.RunFolderError(f"cannot read {path!r}: {error}") from None


def _checkpoint_file(given: pathlib.Path, best: bool) -> tuple[pathlib.Path, pathlib.Path | None]:
    """The run folder, and the checkpoint file to load when `given` names one of its own."""
    folder = given.parent
    if not given.is_file() or folder.name != run_folder.CHECKPOINTS:
        return given, None  # A run folder (or what `read_config` refuses in one line).
    if not (folder.parent / run_folder.CONFIG).is_file():
        raise run_folder.RunFolderError(
            f"{str(given)!r} is a file in no run folder: its folder's parent holds no "
            f"{run_folder.CONFIG}"
        )
    if best and given.name != run_folder.BEST:
        raise ValueError(f"give a checkpoint file or best=True, not both: got {str(given)!r}")
    return folder.parent, given


def _check_not_forked() -> None:
    """A one-line RuntimeError in a child forked after a policy was made: JAX would hang."""
    if _forked[0]:
        raise RuntimeError(
            "this process was forked from one where a batchrl policy ran JAX, whose threads "
            "a fork does not copy, so acting here would hang: start it with 'spawn' or "
            "'forkserver' (multiprocessing.get_context('spawn').Pool)"
        )


def _learner_example(
    algorithm: algorithm_lib.Algorithm, networks: algorithm_lib.Networks, config: TrainConfig
) -> algorithm_lib.Learner:
    """A learner of the run's structure, shapes and dtypes, for the checkpoint to fill.

    Traced, not compiled (compiling the networks' init took 2.2 s of a 2.5 s load of
    `pendulum_jax`): zeros of the traced shapes and dtypes (random keys of zero data),
    which `checkpoint.load` replaces, values and all.
    """
    shapes = algorithm_lib.init_shapes(algorithm, networks, config.shape)
    learner = algorithm_lib.zeros(shapes.learner)  # No storage made beside it.
    return jax.tree.map(_saved_width, learner)


def _saved_width(leaf: jax.Array) -> jax.Array:
    """`leaf` in the 32-bit dtype a checkpoint holds, where JAX's x64 mode traced 64 bits.

    Runs train with x64 off; with it on (an app's `jax_enable_x64`), every float leaf
    was traced float64 and no checkpoint loaded, each said to be of another structure.
    """
    narrow = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}
    narrow[np.dtype(np.uint64)] = np.uint32
    dtype = (
        narrow.get(np.dtype(leaf.dtype))
        if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        else None
    )
    return leaf if dtype is None else leaf.astype(dtype)


def _num_envs(acting: Any) -> int:
    return jax.tree.leaves(acting.running)[0].shape[0]


def _host_action(dtype: Any, action: Any) -> np.ndarray:
    """An action leaf as NumPy, in `dtype` (compiled code holds int64 as int32) if given.

    A copy, not a view of JAX's read-only buffer: the caller's to change (noise added in
    place, `np.clip(..., out=action)`), as SB3's `predict` and `action_space.sample` give.
    """
    action = np.array(action)
    return action if dtype is None else action.astype(dtype, copy=False)

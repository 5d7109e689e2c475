"""Builds the batched env a TrainConfig names: JAX-native, Gymnasium envs, a MuJoCo batch or Atari.

Gymnasium envs are named as `envs.make` reads them, built with the wrappers the config
asks for; episodes end at the env's own time limit or at `max_length` steps, the first.
Atari games (backend 'ale') take `env_kwargs` as `BatchEnv.atari`'s options for training;
evaluation plays them on envs of its own (`build_eval`; `visualize` on one Gymnasium env
that plays as they do): whole games, rewards unclipped, scoring the game's own score.
JAX-native envs are named as their kind registers them, or as `module:qualname` of a
function or class that makes one. Where no name can say what the env is (a lambda, an
env object), the caller passes it: a Gymnasium env constructor, or a `jax_env.Env`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym

from batchrl import bridge, extras
from batchrl import env_spec as env_spec_lib
from batchrl.bridge import seeds as seeds_lib
from batchrl.configs import TrainConfig
from batchrl.env_spec import EnvSpec
from batchrl.envs import BatchEnv, spaces
from batchrl.envs.host import lifecycle, make, mujoco_warnings
from batchrl.envs.jax import classic, env_check, gymnax_env, jax_env
from batchrl.training import env_probe, placement

logger = logging.getLogger("batchrl.training")
# Eval envs of their own draw their seeds from the run's seed plus this, so they start
# no game as any run's training envs do (whose seeds come from seeds below it).
_EVAL_SEEDS = 2**32
# The JAX-native backends, by the function that makes one of their envs by name.
JAX_NATIVE = {"jax": classic.make, "gymnax": gymnax_env.make}


def check_env_name(config: TrainConfig, env: Any = None) -> None:
    """Raises a one-line ValueError when the env cannot be found, before any worker starts."""
    with _extra_named():
        if env is not None:
            _check_given(config, env)
        elif config.jax_native:
            _jax_native(config)  # Names the known envs when it fails.
        elif config.backend == "ale":
            atari_options(config)  # Names the game or option that is not ale-py's.
        else:
            try:
                make.check_name(config.env, config.env_kwargs)
            except ValueError as error:
                if str(error).startswith("unknown env") and gymnax_env.registers(config.env):
                    raise ValueError(
                        f"env {config.env!r} is gymnax's: set backend=gymnax"
                    ) from None
                if not config.env.startswith("ALE/") or "takes no keyword" not in str(error):
                    raise
                raise ValueError(  # An Atari preset's options, on another backend.
                    f"{error}; those given are BatchEnv.atari's (backend='ale', as the Atari "
                    "presets set): set backend=ale, or env_kwargs={} for Gymnasium's own env"
                ) from None
            entry = getattr(gym.registry.get(config.env), "entry_point", None)
            if str(entry).startswith("gymnasium.envs.mujoco"):  # Imported for MuJoCo's alone.
                mujoco_tasks = _mujoco_tasks()
                if config.env in mujoco_tasks.TASKS:  # Its v5 env takes **kwargs on.
                    mujoco_tasks.check_keywords(config.env, config.env_kwargs)


def _mujoco_tasks() -> Any:
    """`envs.mujoco.tasks`, or a one-line ValueError where MuJoCo does not load."""
    try:
        from batchrl.envs.mujoco import tasks
    except Exception as error:
        said = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        gl = os.environ.get("MUJOCO_GL")
        hint = f"; MUJOCO_GL={gl} picks what MuJoCo loads for rendering: unset it" if gl else ""
        raise ValueError(f"MuJoCo does not load ({said.strip()}){hint}") from None
    return tasks


def check_env(config: TrainConfig, env: Any = None) -> EnvSpec:
    """The spec of the env `config` names (or of `env`), from one env built in this process.

    Unknown names, missing extras and unsupported spaces are refused with one line before
    a run folder or a worker exists.
    """
    return _checked(config, env)[0]


def check_run(config: TrainConfig, env: Any = None) -> tuple[TrainConfig, EnvSpec]:
    """`check_env`'s spec, and `config` with `max_length` no longer than the env's own limit.

    Episodes end at the smaller of the two, but `max_length` sizes the phases, the episode
    memory and each eval round: pendulum_jax with `max_length=10000000` ran out of memory
    for episodes of 200 steps. Taking the env's limit is a one-line warning, and so is a
    `max_length` that cuts the env's episodes short.
    """
    spec, limit = _checked(config, env)
    _say_wide_one_hots(spec)
    if limit is not None and config.max_length < limit:  # Cut as asked: said too.
        logger.warning(
            "env %r has its own limit of %d steps, above max_length=%d: its episodes are cut "
            "(truncated) there",
            config.env,
            limit,
            config.max_length,
        )
    if limit is None or config.max_length <= limit:
        return config, spec
    logger.warning(
        "env %r ends its episodes at its own limit of %d steps, below max_length=%d: "
        "max_length=%d is taken",
        config.env,
        limit,
        config.max_length,
        limit,
    )
    return dataclasses.replace(config, max_length=limit), spec


_WIDE_ONE_HOT = 10_000  # Inputs a counted leaf's one-hot may take unsaid.
_COUNTED = (env_spec_lib.DISCRETE, env_spec_lib.MULTI_DISCRETE)


def _say_wide_one_hots(spec: EnvSpec) -> None:
    """A warning for each counted observation leaf whose one-hot takes many inputs.

    Counts are one-hot encoded, as Stable-Baselines3 does: a `Discrete(1_000_000)` state
    id trained at 41 steps/s in 8 GiB, unsaid.
    """
    for path, leaf in env_spec_lib.leaf_paths(spec.observation):
        width = sum(leaf.num_values) if leaf.kind in _COUNTED else 0
        if width > _WIDE_ONE_HOT:
            logger.warning(
                "%s: its counts are one-hot encoded into %s inputs a step: give it as a Box, "
                "or features of it, with a wrapper",
                path,
                f"{width:,}",
            )


def env_limit(config: TrainConfig, env: Any = None) -> int | None:
    """The env's own step limit (None: none), the env checked as `check_run` checks it."""
    return _checked(config, env)[1]


def _checked(config: TrainConfig, env: Any) -> tuple[EnvSpec, int | None]:
    """The env's spec and its own step limit (None: none)."""
    check_env_name(config, env)
    _check_ray(config)
    with _extra_named():
        if config.jax_native:
            native = _jax_native(config, env)
            return native.env_spec, native.max_length
        if config.backend == "ale" and env is None:
            with BatchEnv.atari(config.env, 1, threads=1, **config.env_kwargs) as game:
                observed = game.single_observation_space, game.single_action_space
                return spaces.env_spec(*observed, config.env), None
        building = env_probe.build_limit(config.env, lifecycle.start_timeout(config.worker_timeout))
        try:
            with mujoco_warnings.routed(), building:
                # No `max_length`: its own limit read, not the cut one (`check_run` says).
                one = make.Make(env or config.env, None, kwargs=config.env_kwargs)()
        except env_probe.BuildTimeoutError as error:
            raise ValueError(str(error)) from None
        except ImportError:
            raise  # An extra not installed: named in one line by _extra_named.
        except make.NotAnEnvError as error:
            raise ValueError(str(error)) from None
        except Exception as error:
            if isinstance(error, TypeError) and config.env_kwargs:
                # A keyword an env of **kwargs passes on and refuses.
                raise ValueError(f"env {config.env!r} refused env_kwargs: {error}") from None
            raise ValueError(_build_failed(config.env, error)) from error
        limit = env_probe.own_limit(one)
        try:
            env_probe.say_normalised_twice(config, one, config.env)
            spec = spaces.env_spec(one.observation_space, one.action_space, spaces.env_name(one))
            return spec, limit
        finally:
            env_probe.close(one, config.env, config.worker_timeout)


def _build_failed(name: str, error: Exception) -> str:
    """One line for an env that raised as it was built: the env, the error, where it rose."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"env {name!r} raised {type(error).__name__} as it was built: {error}{where}"


def _check_ray(config: TrainConfig) -> None:
    """Ray, an optional dependency, where the run puts its envs or its acting in actors."""
    if config.backend != "ray" and not config.rollout_actors:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        actors = config.rollout_actors
        setting = f"rollout_actors={actors}" if actors else f"backend {config.backend!r}"
        needs = f"{setting} needs ray, which is not installed: {extras.pip_install('ray')}"
        raise ValueError(needs) from None


@contextlib.contextmanager
def _extra_named() -> Iterator[None]:
    """An env's ImportError (an extra not installed: gymnax, minigrid) as a ValueError.

    Its one line names the extra to install: the train command prints it, not a traceback.
    """
    try:
        yield
    except ImportError as error:
        raise ValueError(str(error)) from None


def _check_given(config: TrainConfig, env: Any) -> None:
    native = config.jax_native
    if native and not isinstance(env, jax_env.Env):
        raise ValueError(
            f"backend={config.backend!r} needs a JAX-native env (reset, step, env_spec, "
            f"max_length), got {type(env).__name__}"
        )
    if not native and not callable(env):
        jax = " (a JAX-native env: set backend='jax')" * isinstance(env, jax_env.Env)
        got = f"got {type(env).__name__}{jax}"
        raise ValueError(f"backend={config.backend!r} needs a Gymnasium env's constructor, {got}")
    if not native and config.backend in ("mujoco", "ale"):
        raise ValueError(f"backend={config.backend!r} builds its envs by name: give env as an id")


def _jax_native(config: TrainConfig, env: Any = None) -> jax_env.Env:
    """The JAX-native env: `env`, or the one `config.env` names, with its own time limit.

    An env object given was checked as it was given (`given_env.with_env`); one a
    `module:Class` name makes is checked here, each a user's own.
    """
    if env is not None:
        return env
    if ":" not in config.env:
        return JAX_NATIVE[config.backend](config.env, **config.env_kwargs)
    maker = make.resolve(config.env)
    try:
        env = maker(**config.env_kwargs)
    except Exception as error:  # The user's own constructor: one line, where it rose.
        if isinstance(error, TypeError) and config.env_kwargs:
            raise ValueError(f"env {config.env!r} refused env_kwargs: {error}") from None
        raise ValueError(_build_failed(config.env, error)) from error
    if gymnax_env.is_gymnax(env):  # A gymnax `Environment` of the user's, its defaults.
        env = gymnax_env.wrap(env, name=config.env)
    if not isinstance(env, jax_env.Env):
        made = type(env).__name__
        raise ValueError(f"env {config.env!r} made a {made}, not a JAX-native env")
    env_check.check(env)  # What its reset and step return, against its spec.
    return env


def build(
    config: TrainConfig,
    env: Any = None,
    seeds: Sequence[int] = (),
    share: tuple[int, int] | None = None,
    replaced: int = 0,
) -> tuple[Any, BatchEnv | None]:
    """The batched env for `config` and the BatchEnv behind it (None when JAX-native).

    `env`, when given, is the env in place of the one `config.env` names: a Gymnasium
    env constructor, or a JAX-native env. `seeds`: the host envs of that many runs in one
    batch, `config.num_envs` a run, each run's envs seeded as that run alone seeds them
    (not on Atari). `share` (first, count): envs
    first.. first + count - 1 of the run's batch alone, each seeded as in the whole
    batch (a rollout actor's; backend "ray" is then worker processes here), or as a
    restarted worker's are after `replaced` restarts (`lifecycle.restart_seed`).
    """
    if seeds and (config.jax_native or config.backend == "ale"):
        raise ValueError(f"backend={config.backend!r} builds no batch of several runs' envs")
    first, count = share or (0, config.num_envs * max(len(seeds), 1))
    check_env_name(config, env)
    if config.jax_native:
        native = _jax_native(config, env)
        limit = min(native.max_length, config.max_length)
        inner = native.env if isinstance(native, jax_env.TimeLimit) else native
        rows = None if share is None else (first, config.num_envs)
        return jax_env.VmapBatch(jax_env.TimeLimit(inner, limit), count, rows), None
    constructor = make.Make(
        env or config.env,
        config.max_length,
        action_repeat=config.action_repeat,
        kwargs=config.env_kwargs,
    )
    if config.backend == "ale":  # Already in this process, and only as ale-py builds it.
        batch_env = _atari(config, atari_options(config), count)
    elif config.backend == "mujoco":
        batch_env = BatchEnv.mujoco(
            config.env,
            count,
            threads=config.env_threads or None,
            max_episode_steps=make.time_limit(config.env, config.max_length),
            **config.env_kwargs,
        )
    elif config.backend == "ray" and share is None:
        batch_env = BatchEnv.ray(
            constructor,
            count,
            actors=config.ray_actors or None,
            envs_per_worker=config.envs_per_worker or None,
            timeout=config.worker_timeout,
            restart=config.restart_workers,
        )
    else:
        batch_env = BatchEnv.external(
            constructor,
            count,
            envs_per_worker=config.envs_per_worker or None,
            local_envs=config.local_envs,
            timeout=config.worker_timeout,
            restart=config.restart_workers,
            first_index=first,
        )
    if share is not None:
        env_seeds = _share_seeds(config.seed, config.num_envs, first, count, replaced)
        return _compiled(config, batch_env, config.seed, env_seeds), batch_env
    return _compiled(config, batch_env, list(seeds) or config.seed), batch_env


def _share_seeds(seed: int, num_envs: int, first: int, count: int, replaced: int) -> list[int]:
    """The seeds of envs first.. first + count - 1 of a batch seeded `seed`.

    After `replaced` restarts, a restarted worker's (`lifecycle.restart_seed`).
    """
    env_seeds = seeds_lib.env_seeds(seed, num_envs)[first : first + count]
    if replaced:
        return [lifecycle.restart_seed(s, first + i, replaced) for i, s in enumerate(env_seeds)]
    return list(env_seeds)


def build_eval(
    config: TrainConfig, share: tuple[int, int] | None = None, replaced: int = 0
) -> tuple[Any, BatchEnv] | None:
    """The batched env evaluation steps and its BatchEnv, when it is not the training env.

    Atari games (backend 'ale') train on episodes that a lost life may end and on
    clipped rewards, as their `env_kwargs` say; evaluation plays whole games with the
    game's own rewards on `config.num_envs` envs of its own, whose seeds are drawn apart
    from every run's training envs. None for every other env: evaluation steps the
    training env. `share` and `replaced` as `build`'s.
    """
    if config.backend != "ale":
        return None
    count = config.num_envs if share is None else share[1]
    batch_env = _atari(config, atari_options(config, evaluation=True), count)
    seed = config.seed + _EVAL_SEEDS
    env_seeds = None if share is None else _share_seeds(seed, config.num_envs, *share, replaced)
    return _compiled(config, batch_env, seed, env_seeds), batch_env


def _compiled(
    config: TrainConfig,
    batch_env: BatchEnv,
    seed: int | list[int],
    env_seeds: Sequence[int] | None = None,
) -> Any:
    """What compiled code steps `batch_env` through: the bridge, or ale-py's XLA calls.

    Either is built for the device acting runs on (`placement.host_acting_device`).

    Atari games (backend 'ale') are stepped by ale-py's XLA FFI calls (`bridge.ale_ffi`),
    which never enter Python; every other BatchEnv through the bridge's host callback.
    """
    devices = config.algorithm.learner_devices
    if config.backend == "ale":
        from batchrl.bridge import ale_ffi  # ale-py is an optional dependency.

        device = placement.host_acting_device(config, ale_ffi.platforms())
        return ale_ffi.AleFfiBatch(
            batch_env, seed=seed, devices=devices, device=device, env_seeds=env_seeds
        )
    device = placement.host_acting_device(config)
    return bridge.InGraphBatchEnv(
        batch_env, seed=seed, devices=devices, device=device, env_seeds=env_seeds
    )


def atari_options(config: TrainConfig, evaluation: bool = False) -> dict[str, Any]:
    """`BatchEnv.atari`'s options for `config`'s games (`settings.run_options`)."""
    try:
        from batchrl.envs.atari import settings  # ale-py is an optional dependency.
    except ImportError as error:
        raise ValueError(
            f"backend='ale' needs ale-py ({error}): {extras.pip_install('atari')}"
        ) from None
    return settings.run_options(config.env, config.env_kwargs, config.max_length, evaluation)


def _atari(config: TrainConfig, options: dict[str, Any], count: int) -> BatchEnv:
    """`count` games of `config.env` with `options`."""
    return BatchEnv.atari(config.env, count, threads=config.env_threads or None, **options)

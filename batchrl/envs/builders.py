"""BatchEnv: a batch of envs with the ways to build one, above the host side and its extensions.

`BatchEnv.from_envs`, `.external`, `.ray`, `.mujoco` and `.atari` start a batch's groups
(in this process, in worker processes, on Ray actors, in one MuJoCo batch, in ale-py's
vector env) and hand them to `BatchEnv(groups)`, a `host.batch.BatchEnvBase`. They live
here, above `host/`, so the host side imports none of its extensions (`mujoco/`, `ray/`,
`atari/`; a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import arguments, batch, lifecycle, local, mujoco_warnings, process
from batchrl.envs.host.external import ExternalProcess


class BatchEnv(batch.BatchEnvBase):
    """A batch of envs with shared spaces, stepped together: a Gymnasium `VectorEnv`.

    Build one with `from_envs` (env objects), `external` (worker processes), `ray` (a Ray
    cluster), `mujoco` (a MuJoCo batch in C threads) or `atari` (ale-py's Atari games in
    C++ threads), or from groups already started,
    `BatchEnv(groups)`. `step` and `reset` behave as Gymnasium's vector envs do, with
    `autoreset_mode` NEXT_STEP (the default), SAME_STEP or DISABLED; env i is seeded with
    seed + i; the rest is `BatchEnvBase`'s.
    """

    @classmethod
    def from_envs(
        cls,
        envs: Sequence[gym.Env | ExternalProcess],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        observation_mode: Any = "same",
    ) -> BatchEnv:
        """Batches envs already built, in the order given.

        Gymnasium envs step in this process, each `ExternalProcess` in its own worker,
        numbered by its place in the batch: errors name it so, and a restart reseeds it so.
        """
        observation_mode = arguments.check_observation_mode(observation_mode)
        envs = list(envs)
        if not envs:
            raise ValueError("a BatchEnv needs at least one env, got none")
        for position, env in enumerate(envs):
            if not isinstance(env, gym.Env | ExternalProcess):
                shown = f"{env!r:.80}"
                if callable(env):
                    shown = f"the constructor {getattr(env, '__qualname__', shown)}"
                hint = ": build envs from constructors with BatchEnv.external"
                raise TypeError(
                    f"from_envs takes env objects (gym.Env or ExternalProcess), got {shown} "
                    f"in place {position}{hint if callable(env) else ''}"
                )
        groups, here = [], []
        for position, env in enumerate(envs):
            if isinstance(env, ExternalProcess):
                if here:
                    groups.append(local.LocalGroup(here, observation_mode, position - len(here)))
                    here = []
                env.group.first_index = position
                groups.append(env.group)
            else:
                here.append(env)
        if here:
            groups.append(local.LocalGroup(here, observation_mode, len(envs) - len(here)))
        return cls(groups, autoreset_mode=autoreset_mode, observation_mode=observation_mode)

    @classmethod
    def external(
        cls,
        env: str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
        num_envs: int | None = None,
        *,
        envs_per_worker: int | None = None,
        timeout: float | None = lifecycle.DEFAULT_TIMEOUT,
        restart: bool = False,
        context: str | None = lifecycle.DEFAULT_CONTEXT,
        spin: float = lifecycle.DEFAULT_SPIN,
        local_envs: int | str = 0,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        first_index: int = 0,
        observation_mode: Any = "same",
        max_concurrency: int | None = None,
        **env_kwargs: Any,
    ) -> BatchEnv:
        """Builds envs in worker processes, `envs_per_worker` to a process.

        `env` is a Gymnasium id, a constructor called `num_envs` times, or a list of
        constructors; `env_kwargs` go to `gym.make` with an id (`render_mode`, ...), as
        `gym.make_vec`'s do. By default there is one worker per core. `timeout`, `restart`,
        `context` and `spin` are those of `ExternalProcess`.

        `local_envs`: how many of the envs (the last ones) this process steps itself
        while the workers step theirs, or "auto" for its even share beside one worker
        per other core. On a machine with few cores this keeps every core busy without
        a process waiting to be woken, and is fastest (32 HalfCheetah-v5 on 2 cores:
        40.7k env-steps/s, against 34.7k all in workers); those envs run in the caller's
        process, so a crash in one is not caught or restarted.

        `first_index`: the number of the first env when this batch is part of a larger
        one (a Ray actor's share): it names envs in errors and seeds their restarts.
        `observation_mode`: `AsyncVectorEnv`'s (`BatchEnvBase`). `max_concurrency`:
        Gymnasium 1.4 `AsyncVectorEnv`'s, the most envs stepping at once: that many
        workers (at most one an env), the envs shared out evenly (in place of
        `envs_per_worker`).
        """
        mode = arguments.check_autoreset_mode(autoreset_mode)
        observation_mode = arguments.check_observation_mode(observation_mode)
        constructors = arguments.constructors(env, num_envs, env_kwargs)
        restart = arguments.check_restart(restart)
        num_local = arguments.check_local_envs(local_envs, len(constructors))
        remote = constructors[: len(constructors) - num_local]
        sizes = arguments.worker_sizes(
            max_concurrency,
            len(remote),
            arguments.check_envs_per_worker(envs_per_worker),
            num_local,
        )
        groups = []
        try:
            start = 0
            for size in sizes:
                groups.append(
                    process.ProcessGroup(
                        remote[start : start + size],
                        first_index=first_index + start,
                        timeout=timeout,
                        restart=restart,
                        context=context,
                        spin=spin,
                        observation_mode=observation_mode,
                    )
                )
                start += size
            if num_local:
                with mujoco_warnings.routed():  # As in a worker: no MUJOCO_LOG.TXT here.
                    here = [make() for make in constructors[len(remote) :]]
                groups.append(local.LocalGroup(here, observation_mode, first_index + len(remote)))
        except BaseException:
            for started in groups:
                started.close()
            raise
        return cls(groups, autoreset_mode=mode, observation_mode=observation_mode)

    @classmethod
    def ray(
        cls,
        env: str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
        num_envs: int | None = None,
        *,
        actors: int | None = None,
        envs_per_worker: int | None = None,
        timeout: float | None = lifecycle.DEFAULT_TIMEOUT,
        restart: bool = False,
        local_envs: int | str = 0,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        actor_options: dict[str, Any] | None = None,
        observation_mode: Any = "same",
        **env_kwargs: Any,
    ) -> BatchEnv:
        """Builds envs on a Ray cluster, split evenly over `actors` actors spread over its nodes.

        Each actor holds its share as `external` would on its node (`envs_per_worker`
        and `local_envs` apply per actor), so a batch step costs one Ray call per actor.
        Connects to the Ray the process uses (`ray.init` called, or `RAY_ADDRESS`), or
        starts a local one that stops when the batch closes. `actors`: one per node by
        default. `timeout` and `restart` are those of `external`; `restart=True` also
        replaces a lost actor on a live node. `actor_options` go to Ray's `.options()`
        (resources, runtime_env); actors ask for no CPU by default. `observation_mode`
        and `env_kwargs`: as in `external`. Needs the `ray` extra
        (`pip install -e '.[ray]'`).
        """
        from batchrl.envs.ray import cluster  # Ray is an optional dependency.

        return cluster.build(
            cls,
            env,
            num_envs,
            actors=actors,
            envs_per_worker=envs_per_worker,
            timeout=timeout,
            restart=restart,
            local_envs=local_envs,
            autoreset_mode=autoreset_mode,
            actor_options=actor_options,
            observation_mode=observation_mode,
            env_kwargs=env_kwargs,
        )

    @classmethod
    def mujoco(
        cls,
        env_id: str,
        num_envs: int,
        *,
        threads: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **env_kwargs: Any,
    ) -> BatchEnv:
        """Builds `num_envs` envs of a Gymnasium v5 MuJoCo task as one `mujoco.batch.Batch`.

        MuJoCo steps them on `threads` C threads (None: one per core this process may run
        on) in this process, with no worker process and no messaging; env i with seed
        s + i gets the episodes `gym.make(env_id, **env_kwargs).reset(seed=s + i)` gets.
        `env_kwargs` are Gymnasium's constructor keywords (`ctrl_cost_weight`,
        `max_episode_steps`, ...).
        Implements HalfCheetah, Hopper, Walker2d, Ant, Humanoid, Reacher, Pusher, Swimmer,
        InvertedPendulum and InvertedDoublePendulum (v5).
        """
        # Imported here: MuJoCo picks its OpenGL backend as it loads, and a MUJOCO_GL whose
        # library is missing would fail `import batchrl` (`host.mujoco_warnings`).
        from batchrl.envs.mujoco import mujoco_group

        mode = arguments.check_autoreset_mode(autoreset_mode)
        group = mujoco_group.MujocoGroup(env_id, num_envs, threads=threads, **env_kwargs)
        return cls([group], autoreset_mode=mode)

    @classmethod
    def atari(
        cls,
        game: str,
        num_envs: int,
        *,
        threads: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **options: Any,
    ) -> BatchEnv:
        """Builds `num_envs` games of an Atari ROM as one ale-py `AtariVectorEnv`.

        ale-py steps them, preprocessed as in DQN (frames of 4 x 84 x 84 uint8), on
        `threads` C++ threads (None: one per core this process may run on) in this
        process. `game` is a ROM id ("breakout") or a v5 id ("ALE/Breakout-v5"), which
        brings the settings Gymnasium registers for it (sticky actions at 0.25), as
        `gym.make_vec(game)` does. `options` are AtariVectorEnv's (`noop_max`,
        `episodic_life`, `life_loss_info`, `reward_clipping`, `repeat_action_probability`,
        ...). With `life_loss_info`, a lost life ends the episode and the game plays on: a
        reset without a seed goes on from there. Env i with seed s + i starts where
        AtariVectorEnv's env seeded with s + i starts. Needs the `atari` extra
        (`pip install -e '.[atari]'`).
        """
        from batchrl.envs.atari import atari_group  # ale-py is an optional dependency.

        mode = arguments.check_autoreset_mode(autoreset_mode)
        group = atari_group.AtariGroup(game, num_envs, threads=threads, **options)
        return cls([group], autoreset_mode=mode)

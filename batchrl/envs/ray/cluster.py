"""A batch laid out over a Ray cluster: its envs split evenly over actors spread over nodes."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import arguments
from batchrl.envs.ray import ray_group


def build(
    cls: type,
    env: Any,
    num_envs: int | None,
    *,
    actors: int | None,
    envs_per_worker: int | None,
    timeout: float | None,
    restart: bool,
    local_envs: int | str,
    autoreset_mode: AutoresetMode | str,
    actor_options: dict[str, Any] | None,
    observation_mode: Any = "same",
    env_kwargs: dict[str, Any] | None = None,
) -> Any:
    """A `cls` (BatchEnv) whose envs are split evenly over `actors` actors spread over nodes."""
    mode = arguments.check_autoreset_mode(autoreset_mode)
    observation_mode = arguments.check_observation_mode(observation_mode)
    constructors = arguments.constructors(env, num_envs, env_kwargs)
    timeout = arguments.check_timeout(timeout)
    restart = arguments.check_restart(restart)
    # Checked here, not in the actors, where a bad one would read as an env's failure.
    envs_per_worker = arguments.check_envs_per_worker(envs_per_worker)
    actors = _check_actors(actors, len(constructors))
    actor_options = _check_actor_options(actor_options)
    # Before Ray starts (seconds): by the layout where `actors` sets it, else as far as
    # it can be without the cluster's nodes.
    _check_local_envs(local_envs, _fewest(len(constructors), actors or 1))
    ray_group.SESSION.join()
    groups: list[ray_group.RayGroup] = []
    try:
        nodes = ray_group.alive_nodes()
        count = len(nodes) if actors is None else actors
        if count > len(constructors):  # One per node, the default, on more nodes than envs.
            raise ValueError(
                f"num_envs={len(constructors)} is fewer than the cluster's {count} nodes: "
                f"pass actors from 1 to {len(constructors)}"
            )
        bounds = [len(constructors) * k // count for k in range(count + 1)]
        _check_local_envs(local_envs, _fewest(len(constructors), count))
        host_options = {
            "envs_per_worker": envs_per_worker,
            "local_envs": local_envs,
            "observation_mode": observation_mode,
        }
        for number, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            groups.append(
                ray_group.RayGroup(
                    constructors[lo:hi],
                    first_index=lo,
                    node=nodes[number % len(nodes)],
                    timeout=timeout,
                    restart=restart,
                    host_options=host_options,
                    actor_options=actor_options,
                    build=cls.external,
                )
            )
        for started in groups:
            started.wait_ready()
    except BaseException:
        for started in groups:
            started.close()
        raise
    finally:
        ray_group.SESSION.leave()  # Each group holds the session until it closes.
    # Which closes the groups if it cannot be made.
    return cls(groups, autoreset_mode=mode, observation_mode=observation_mode)


def _check_actors(actors: Any, num_envs: int) -> int | None:
    """`actors` as an int from 1 to `num_envs` (None: one per node), or a ValueError naming it."""
    if actors is None:
        return None
    if (
        isinstance(actors, bool)
        or not isinstance(actors, int | np.integer)
        or not 1 <= actors <= num_envs
    ):
        raise ValueError(f"actors must be between 1 and num_envs={num_envs}, got {actors!r}")
    return int(actors)


def _check_actor_options(options: Any) -> dict[str, Any]:
    """`options` as a dict of `.options()` keywords (None: none), or a ValueError naming it."""
    if options is None:
        return {}
    if not isinstance(options, dict) or not all(isinstance(key, str) for key in options):
        raise ValueError(
            f"actor_options is a dict of Ray's actor options such as {{'num_cpus': 1}}, got "
            f"{options!r}"
        )
    return dict(options)


def _fewest(num_envs: int, count: int) -> int:
    """The fewest envs an actor holds of `num_envs` split evenly over `count` actors."""
    return num_envs // count


def _check_local_envs(local_envs: Any, fewest: int) -> None:
    """A ValueError if `local_envs` does not fit each actor's share: `fewest` envs or more."""
    if local_envs == "auto":
        return
    try:
        arguments.check_local_envs(local_envs, fewest)
    except ValueError:
        raise ValueError(
            f"local_envs applies per actor: a number of envs from 0 to {fewest} (the fewest "
            f"an actor holds here) or 'auto', got {local_envs!r}"
        ) from None

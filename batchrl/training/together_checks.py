"""Which configs and placements can train their seeds together, each refused in one line.

A together-run's seeds share everything static (`together`): their configs may differ
in the seed alone, and the seeds map over one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchrl.configs import train_config
from batchrl.training import placement


def check_configs(configs: Sequence[train_config.TrainConfig]) -> None:
    """A one-line ValueError unless `configs` differ in their seeds only, all distinct."""
    if not configs:
        raise ValueError("a together-run needs at least one seed, got none")
    seeds = [config.seed for config in configs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"the seeds of a together-run must differ, got {seeds}")
    alone = "train each seed on its own (train without --seeds, or sweep without --together)"
    if configs[0].backend == "ale":
        raise ValueError(
            "seeds train together on one batch of envs, each seed's seeded as its solo run's, "
            f"and backend='ale' (Atari's batch) seeds all its games from one seed: {alone}"
        )
    if configs[0].rollout_actors:
        actors = configs[0].rollout_actors
        raise ValueError(
            f"seeds train together on this machine's envs, got rollout_actors={actors}: {alone}"
        )
    first = train_config.flat(configs[0])  # The algorithm's settings by their own names.
    for config in configs[1:]:
        flat = train_config.flat(config)
        if differ := [k for k, v in flat.items() if k != "seed" and v != first.get(k)]:
            said = ", ".join(
                f"{k}={flat[k]!r} (seed {configs[0].seed}'s {first.get(k)!r})" for k in differ
            )
            raise ValueError(
                f"the runs trained together differ in more than their seed: seed "
                f"{config.seed}'s {said}"
            )


def check_placement(where: Any, config: train_config.TrainConfig) -> None:
    """A one-line ValueError for a placement whose seeds cannot map together.

    Names the settings `config` placed `where` by and the values that put both on one device.
    """
    if where.split:
        acting, learner = placement.name_of(where.acting), placement.name_of(where.learner)
        raise ValueError(
            "seeds on a JAX-native env train together only acting and learning on one device, "
            f"got acting_device={config.acting_device!r} (acting on {acting}) and "
            f"device={config.device!r} (learning on {learner}): set acting_device=auto to act "
            f"where they learn, or device={acting} to learn where they act"
        )

"""MiniGrid's envs as batchrl reads them: no mission string, and the image's true bounds.

A MiniGrid observation is a `Dict` of the agent's egocentric view ("image": uint8
[7, 7, 3], each cell's object, colour and state as small indices), the way it faces
("direction": `Discrete(4)`) and a mission string ("mission"), which has no fixed shape
and which batchrl refuses. `make` builds a MiniGrid env and applies, in order:

- Gymnasium's `FilterObservation`, keeping the image and the direction;
- `CellBounds`, which declares the image's `Box` as the indices MiniGrid writes (0 to
  10) rather than its loose 0 to 255, so that scaling the image by its bounds (the
  encoder's rule) gives inputs in [0, 1] and not below 0.04.

Configs name it as their env, `batchrl.envs.host.minigrid_env:make`, with the MiniGrid
id in `env_kwargs`. Needs `pip install -e '.[minigrid]'`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from batchrl import extras

KEPT = ("direction", "image")


def hint(name: str) -> str:
    """How to train MiniGrid's env `name` (an id, or `module:id`): "" for other names."""
    env_id = name.strip("'\"").rpartition(":")[2]
    if not env_id.startswith(("MiniGrid-", "BabyAI-")):
        return ""
    return (
        f" (MiniGrid's envs train through batchrl's wrapper, as the minigrid_doorkey preset's "
        f"does: --set env={__name__}:make 'env_kwargs={{env_id: {env_id}}}')"
    )


class CellBounds(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Declares the "image" leaf's bounds as those of MiniGrid's cell indices; values unchanged."""

    def __init__(self, env: gym.Env):
        from minigrid.core import constants

        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        tables = (constants.OBJECT_TO_IDX, constants.COLOR_TO_IDX, constants.STATE_TO_IDX)
        high = max(max(table.values()) for table in tables)
        image = env.observation_space["image"]
        spaces = dict(env.observation_space.spaces)
        spaces["image"] = gym.spaces.Box(0, high, image.shape, image.dtype)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return observation


def make(env_id: str = "MiniGrid-DoorKey-5x5-v0", **kwargs: Any) -> gym.Env:
    """The MiniGrid env `env_id` (made with `kwargs`): its image and direction, image bounded.

    Raises:
        ImportError: minigrid is not installed, or a module it imports is missing (named).
        ValueError: `env_id` is not the id of one of MiniGrid's envs.
    """
    try:
        import minigrid  # noqa: F401  (registers MiniGrid's ids)
    except ImportError as error:
        missing = "is not installed" if error.name == "minigrid" else f"failed to import ({error})"
        raise ImportError(
            f"MiniGrid's envs need minigrid, which {missing}: {extras.pip_install('minigrid')}"
        ) from None
    _check_id(env_id)
    env = gym.wrappers.FilterObservation(gym.make(env_id, **kwargs), list(KEPT))
    return CellBounds(env)


def _check_id(env_id: Any) -> None:
    """A one-line ValueError for an `env_id` that names no MiniGrid env (a number, CartPole).

    Unchecked, a number failed in an assert of Gymnasium's and another env's id in
    `FilterObservation`, naming neither the id nor what it takes. An id nothing registers
    passes on: Gymnasium names it, with the ids near it.
    """
    if isinstance(env_id, str):
        spec = gym.registry.get(env_id)
        if spec is None or str(spec.entry_point).startswith("minigrid."):
            return
    raise ValueError(
        f"env_id {env_id!r} is not one of MiniGrid's envs: give a MiniGrid id such as "
        "'MiniGrid-DoorKey-5x5-v0' (MiniGrid's ids begin 'MiniGrid-' or 'BabyAI-')"
    )

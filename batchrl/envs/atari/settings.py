"""The settings of a `BatchEnv.atari`: the game a name means, and AtariVectorEnv's options, checked.

A game is named by ale-py's ROM id ("breakout", "ms_pacman") or by a Gymnasium id of
ale-py's v5 envs ("ALE/Breakout-v5"). An id brings the settings Gymnasium registers for
it (`gym.make_vec(id)` builds the same: sticky actions at 0.25 for v5), a ROM id
AtariVectorEnv's own defaults (no sticky actions); the options given override either.
The options are AtariVectorEnv's keywords but those the batch sets itself: its threads,
its autoreset mode, and the whole batch each step (no `batch_size`).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import numbers
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
from ale_py import roms
from ale_py.vector_env import AtariVectorEnv

gym.register_envs(ale_py)

_VECTOR_ENTRY_POINT = "ale_py.vector_env:AtariVectorEnv"
_SINGLE_ENTRY_POINT = "ale_py.env:AtariEnv"  # Of every id; only v5 ids have the vector's.
# What evaluation plays games with, whatever training's options: whole games and the
# game's own rewards, so it scores the game's own score.
WHOLE_GAMES = {"episodic_life": False, "life_loss_info": False, "reward_clipping": False}
# AtariVectorEnv's keywords that the batch sets, and why a caller cannot.
_SET_BY_THE_BATCH = {
    "num_threads": "give BatchEnv.atari's threads (a run's env_threads) instead",
    "autoreset_mode": "give BatchEnv.atari's autoreset_mode instead",
    "batch_size": "a BatchEnv steps every env each step",
}
# The values each option takes: (what they are, whether a value is one). ale-py checks
# few of them; the rest fail in C++ or numpy with no name, or play wrong (a repeat
# probability of 1.5 repeats every action, so the agent's are never played).
_WHOLE = (numbers.Integral,)
_VALUES = {
    **dict.fromkeys(
        ("frameskip", "stack_num", "img_height", "img_width", "max_num_frames_per_episode"),
        ("a whole number of at least 1", lambda v: _is(v, _WHOLE) and v >= 1),
    ),
    "noop_max": ("a whole number of at least 0", lambda v: _is(v, _WHOLE) and v >= 0),
    "thread_affinity_offset": (
        "a whole number of at least -1 (-1: none)",
        lambda v: _is(v, _WHOLE) and v >= -1,
    ),
    **dict.fromkeys(
        ("repeat_action_probability", "continuous_action_threshold"),
        ("a number from 0 to 1", lambda v: _is(v, (numbers.Real,)) and 0 <= v <= 1),
    ),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What builds one batch's games.

    Attributes:
        rom: ale-py's ROM id of the game.
        options: Every keyword of AtariVectorEnv but those the batch sets, each as given,
            as the id registers it, or AtariVectorEnv's default.
        spec: The game's v5 `EnvSpec` with `options` as its kwargs, so that
            `gym.make_vec(spec, n)` builds the same games; None for a ROM without one.
    """

    rom: str
    options: dict[str, Any]
    spec: gym.envs.registration.EnvSpec | None


def defaults() -> dict[str, Any]:
    """AtariVectorEnv's keyword options and their defaults, those the batch sets left out."""
    parameters = inspect.signature(AtariVectorEnv.__init__).parameters.values()
    return {
        p.name: p.default
        for p in parameters
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _SET_BY_THE_BATCH
    }


def resolve(game: str, options: dict[str, Any]) -> Settings:
    """The settings `game` and `options` name; a one-line ValueError naming a bad one."""
    rom, registered = _game(game)
    allowed = defaults()
    for name in options:
        if name in _SET_BY_THE_BATCH:
            raise ValueError(f"BatchEnv.atari sets {name} itself: {_SET_BY_THE_BATCH[name]}")
        if name not in allowed:
            raise ValueError(
                f"unknown option {name!r} of BatchEnv.atari: AtariVectorEnv takes "
                f"{', '.join(allowed)}"
            )
    for name, value in options.items():
        _check_value(name, value, allowed[name])
    # numpy's numbers as Python's, which ale-py alone takes (its frameskip refuses np.int64).
    options = {k: v.item() if isinstance(v, np.generic) else v for k, v in options.items()}
    chosen = {**allowed, **{k: v for k, v in registered.items() if k in allowed}, **options}
    return Settings(rom, chosen, _spec(rom, chosen))


def _check_value(name: str, value: Any, default: Any) -> None:
    """A one-line ValueError naming an option's value that it cannot take, and what it takes.

    A flag (an option whose default is a bool) takes True or False.
    """
    if isinstance(default, bool):
        kind, fits = "True or False", isinstance(value, bool | np.bool_)
    else:
        kind, check = _VALUES[name]
        fits = check(value)
    if not fits:
        raise ValueError(f"BatchEnv.atari's {name} must be {kind}, got {value!r}")


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    """Whether `value` is of `kinds` and no bool (which Python counts as an integer)."""
    return isinstance(value, kinds) and not isinstance(value, bool | np.bool_)


def _game(game: str) -> tuple[str, dict[str, Any]]:
    """The ROM id `game` names, and the options its Gymnasium id registers (none for a ROM id)."""
    if not isinstance(game, str):
        raise ValueError(f"an Atari game is named by a string, got {game!r}")
    if game in roms.get_all_rom_ids():
        return game, {}
    try:
        spec = gym.spec(game)
    except gym.error.Error:
        spec = None
    single = spec is not None and spec.entry_point == _SINGLE_ENTRY_POINT
    if single and spec.vector_entry_point != _VECTOR_ENTRY_POINT:  # A v4 id, say.
        rom, v5 = spec.kwargs["game"], _spec(spec.kwargs["game"], {})
        v5 = f" or {v5.id!r}" if v5 else ""
        raise ValueError(
            f"{game!r} is an id of ale-py's single AtariEnv, not of its vector env: name the "
            f"game {rom!r}{v5}, and its settings as options"
        )
    if spec is None or spec.vector_entry_point != _VECTOR_ENTRY_POINT:
        v5 = [name for name in gym.registry if name.startswith("ALE/") and name.endswith("-v5")]
        close = difflib.get_close_matches(game, [*roms.get_all_rom_ids(), *v5], n=1)
        close = f"; did you mean {close[0]!r}?" if close else ""  # Not all 104 ROMs listed.
        raise ValueError(
            f"unknown Atari game {game!r}: name a ROM of ale-py or its v5 id, as 'breakout' or "
            f"'ALE/Breakout-v5'{close}"
        )
    kwargs = dict(spec.kwargs)
    return kwargs.pop("game"), kwargs


def _spec(rom: str, options: dict[str, Any]) -> gym.envs.registration.EnvSpec | None:
    name = f"ALE/{ale_py.registration.rom_id_to_name(rom)}-v5"
    if name not in gym.registry:
        return None  # A ROM with no single-player mode, which Gymnasium does not register.
    return dataclasses.replace(gym.spec(name), kwargs={"game": rom, **options})


def run_options(
    game: str, options: dict[str, Any], max_length: int, evaluation: bool = False
) -> dict[str, Any]:
    """`BatchEnv.atari`'s options for a run's games, which end at `max_length` env steps.

    Training plays with `options`; evaluation (`evaluation`) plays whole games with the
    game's own rewards (`WHOLE_GAMES`). One-line ValueErrors name a bad game or option.
    """
    options = {**options, **(WHOLE_GAMES if evaluation else {})}
    chosen = resolve(game, options).options
    frames = min(chosen["max_num_frames_per_episode"], max_length * chosen["frameskip"])
    return {**options, "max_num_frames_per_episode": frames}

"""Runs of one config's name trained with other settings, told apart by those settings.

A run's line names its config (a preset, a YAML file's name), which `--set` keeps: two
sweeps of `pendulum_jax`, one with `--set learning_rate=1e-4` and one with 1e-3, write
lines of one name. `stats` and `table` count a name's seeds as one config's, so each
such run is named by its config and the settings in which its name's runs differ,
`pendulum_jax [learning_rate=0.0001]`, and the two are counted apart. A line without
settings (written before lines held them) keeps its config's name.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from batchrl.configs import train_config

# Settings in which the seeds of one experiment differ: its seeds, what a resume may
# change (`train_config.RESUME_MAY_CHANGE`), and how often checkpoints are written and
# kept, each of which leaves the results as they are.
IGNORED = frozenset(
    {"seed", "checkpoint_every", "keep_checkpoints", *train_config.RESUME_MAY_CHANGE}
)


def flat(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A line's `settings` (a config as `dataclasses.asdict` gives it) by setting name."""
    return {
        **{key: value for key, value in settings.items() if key != "algorithm"},
        **settings.get("algorithm", {}),
    }


def differing(flats: Sequence[Mapping[str, Any]], ignored: Iterable[str] = IGNORED) -> list[str]:
    """The settings, sorted, whose values are not the same in every one of `flats`.

    Values compare as JSON writes them: a run folder's config holds layers as a tuple, a
    sweep's line read back as a list, and the two are one setting.
    """
    keys = sorted({key for one in flats for key in one} - set(ignored))
    return [key for key in keys if len({_json(one.get(key)) for one in flats}) > 1]


def namer(lines: Iterable[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], str]:
    """A function naming a line as `lines` tell it apart: its config, and how it differs.

    A config's runs all of one set of settings keep the config's name; where they differ,
    each is `config [key=value, ...]` over the settings that differ among them.
    """
    by_config: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for line in lines:
        if "settings" in line:
            by_config[line["config"]].append(flat(line["settings"]))
    apart = {config: differing(flats) for config, flats in by_config.items()}

    def name(line: Mapping[str, Any]) -> str:
        keys = apart.get(line["config"])
        if not keys or "settings" not in line:
            return line["config"]
        settings = flat(line["settings"])
        said = ", ".join(f"{key}={_value(settings.get(key))}" for key in keys)
        return f"{line['config']} [{said}]"

    return name


def config_of(name: str) -> str:
    """The config's name in a run's name (`pendulum_jax [learning_rate=0.001]`: pendulum_jax)."""
    return name.split(" [", 1)[0]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _value(value: Any) -> str:
    """A setting as `--set` spells it: a string bare, anything else as JSON writes it."""
    return value if isinstance(value, str) else json.dumps(value)

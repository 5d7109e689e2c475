"""`--set key=value`: a run's or its algorithm's field set from text, parsed by its type.

A key is a field of the run (`steps`, `backend`) or of its algorithm (`kl_target`,
also written `algorithm.kl_target`); the text is parsed as the field's type (numbers,
booleans, tuples as `64,64`, mappings as YAML or JSON). A bad key or value is a one-line
ValueError that says what is allowed.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

import yaml

from batchrl.configs import peer_names, train_config


class _Loader(yaml.SafeLoader):
    """`yaml.safe_load`'s YAML, with numbers JSON writes read as numbers: `1e-3`, `2E5`.

    YAML 1.1, which PyYAML reads, wants a dot in a float (`1.0e-3`) and keeps `1e-3` a
    string, which an env's constructor then gets in place of its number. A key given
    twice in one mapping is an error, where PyYAML keeps the last without a word.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [self.construct_object(key, deep=True) for key, _ in node.value]
        for n, key in enumerate(keys):
            if key in keys[:n]:  # Said at its second place.
                mark = node.value[n][0].start_mark
                raise yaml.constructor.ConstructorError(None, None, f"{key!r} given twice", mark)
        return super().construct_mapping(node, deep=deep)


class _Dumper(yaml.SafeDumper):
    """`yaml.safe_dump`'s YAML, quoting the text `_Loader` would read as a number ("1e5")."""


for _kind in (_Loader, _Dumper):
    _kind.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )


def load_yaml(text: str) -> Any:
    """YAML as `--set` reads it: `yaml.safe_load`'s, with `1e-3` a number (`_Loader`)."""
    return yaml.load(text, Loader=_Loader)  # A SafeLoader: no code runs.


def dump_yaml(data: Any) -> str:
    """`data` as YAML that `load_yaml` reads back equal, keys in their order."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def _parse(name: str, kind: Any, text: str) -> Any:
    """Parses `text` as a value of type `kind`; raises ValueError saying what was expected."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if text.strip().lower() in ("none", "null", "") and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        try:
            return _parse(name, options[0], text)
        except ValueError as error:
            raise ValueError(f"{error}, or none" if type(None) in args else str(error)) from None
    if origin is dict:
        try:
            value = load_yaml(text)
        except yaml.constructor.ConstructorError as error:  # A key given twice, say.
            raise ValueError(f"{name}={text!r}: {error.problem}") from None
        except yaml.YAMLError:
            value = text
        return train_config.typed(name, kind, value)
    if origin is tuple:
        if text.strip().lower() in ("none", "null"):  # Said as "expected an integer".
            raise ValueError(f"{name}={text!r}: expected items such as 64,64; none is {name}=")
        inner = _unbracketed(name, text)
        parts = [part.strip() for part in inner.split(",")] if inner else []
        if parts and not parts[-1]:
            parts.pop()  # A trailing comma, as Python's (64,).
        if "" in parts:
            raise ValueError(f"{name}={text!r}: an empty item; expected items between commas")
        return tuple(_item(name, args[0], text, part) for part in parts)
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{name}={text!r}: expected true or false (yes or no, 1 or 0, on or off)")
    if kind is int:
        with contextlib.suppress(ValueError):  # Exact, however large; else "1e6", "2.5e5".
            return int(text.replace("_", ""))
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            raise ValueError(f"{name}={text!r}: expected an integer") from None
        if not value.is_integer():
            raise ValueError(f"{name}={text!r}: expected an integer")
        return int(value)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name}={text!r}: expected a number") from None
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]  # Quoted, as `--list-keys` shows a string.
    return text


def _item(name: str, kind: Any, text: str, part: str) -> Any:
    """One item of a sequence `text`; a bad one named within it (`64x64` is not 64,64)."""
    try:
        return _parse(name, kind, part)
    except ValueError:
        items = {int: "integers", float: "numbers"}.get(kind, "items")
        raise ValueError(
            f"{name}={text!r}: expected {items} between commas, such as 64,64; {part!r} is not one"
        ) from None


def _unbracketed(name: str, text: str) -> str:
    """A sequence's items: `text` inside one pair of () or [], or bare; a ValueError else."""
    inner = text.strip()
    if inner[:1] + inner[-1:] in ("()", "[]"):
        inner = inner[1:-1]
    if any(bracket in inner for bracket in "()[]"):
        raise ValueError(f"{name}={text!r}: expected items such as 64,64 or (64, 64)")
    return inner


def steps_argument(text: str) -> int:
    """A command's `--steps` as `--set steps=` reads it (`1e6` too); argparse's error else."""
    try:
        return _parse("steps", int, text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def seed_argument(text: str) -> int:
    """A command's `--seed`, or one of its `--seeds`, as `--set seed=` reads it (`1e3` too)."""
    try:
        return _parse("seed", int, text)
    except ValueError:
        several = re.fullmatch(r"\s*\d+(\s*[-,: ]\s*\d+)+\s*", text)  # `0,1`, `0-3`.
        apart = ": give the seeds apart, such as --seeds 0 1 2 3" if several else ""
        raise argparse.ArgumentTypeError(f"a seed is a whole number, got {text!r}{apart}") from None


def add_argument(parser: argparse.ArgumentParser) -> None:
    """The commands' `--set`: several `key=value` after one, or the flag given again."""
    parser.add_argument(
        "--set",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override fields: --set a=1 b=2, or --set given once a field",
    )


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`; config keys given as flags (`--env X`) are told `--set`.

    argparse's own error, "unrecognized arguments: --env X --steps 100", left a user of
    flags such as Stable-Baselines3's or CleanRL's to find `--set` alone.
    """
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        said = f"unrecognized arguments: {' '.join(unknown)}"
        settings = _as_settings(unknown)
        if settings:
            said += f"; config keys go after --set: --set {' '.join(settings)}"
        parser.error(said)
    return args


def _as_settings(unknown: Sequence[str]) -> list[str]:
    """`key=value` for each flag of `unknown` that names a config key, under batchrl's name."""
    settings = []
    for index, token in enumerate(unknown):
        if not token.startswith("--"):
            continue
        name, equals, value = token[2:].partition("=")
        key = name.replace("-", "_")
        key = key if train_config.is_key(key) else peer_names.setting(key)
        if key is None:
            continue
        if not equals:  # `--env X`: the value is the next argument, where it is not a flag.
            following = unknown[index + 1] if index + 1 < len(unknown) else "--"
            value = "VALUE" if following.startswith("--") else following
        settings.append(f"{key}={value}")
    return settings


def parse_override(config: train_config.TrainConfig, assignment: str) -> train_config.TrainConfig:
    """`config` with one `key=value` applied; a one-line ValueError for a bad key or value."""
    return parse_overrides(config, [assignment])


def parse_overrides(
    config: train_config.TrainConfig, assignments: Sequence[str]
) -> train_config.TrainConfig:
    """`config` with every `key=value` applied, checked once as a whole (`set_fields`)."""
    settings = []
    for assignment in assignments:
        if "=" not in assignment:
            raise ValueError(f"--set {assignment!r}: expected key=value")
        name, text = (part.strip() for part in assignment.split("=", 1))
        settings.append((name, text))
    changed = train_config.set_fields(config, settings, _parse)
    train_config.say_dropped_env_kwargs(config, changed)
    return changed

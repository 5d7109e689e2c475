"""Trains PPO on a preset: run folder, config as YAML, train and eval phases, checkpoints, logs.

    python -m batchrl.scripts.train --logdir runs --config pendulum [--seed 1] [--set k=v ...]
    python -m batchrl.scripts.train --logdir runs --timestamp 20261122T101500   # resume
    python -m batchrl.scripts.train --logdir runs --config pendulum --timestamp T  # start or resume
    python -m batchrl.scripts.train --list

A new run goes to LOGDIR/<timestamp>-<config>/. As in the seed, adding `--timestamp T` to
the command that started a run resumes it (and starts run T-<config> if there is none);
a resume whose --config, --seed or --set differ from the saved config names the keys
that differ and stops. Resuming restores parameters, optimiser,
normalisers, KL penalty, step counters, random keys and the episode memory from the
last good checkpoint; on JAX-native envs it continues exactly as if never stopped.
Ctrl-C or SIGTERM saves a checkpoint and exits cleanly. Bad input ends with one line.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from batchrl import configs
from batchrl.bridge import xla_threads
from batchrl.envs.host import errors as env_errors
from batchrl.envs.host import spec

CONFIG_FILE = "config.yaml"


class UsageError(Exception):
    """Bad input from the command line: reported as one line, exit status 2."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="batchrl", description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="folder that holds the runs")
    parser.add_argument("--config", help="preset name (see --list)")
    parser.add_argument(
        "--timestamp", help="resume the run with this timestamp (with --config: start it if new)"
    )
    parser.add_argument("--seed", type=int, help="run seed (new runs only)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a field"
    )
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    parser.add_argument("--list-keys", action="store_true", help="list the config keys and exit")
    return parser.parse_args(argv)


def list_presets() -> str:
    presets = {name: make() for name, make in configs.PRESETS.items()}
    width = max(len(config.env) for config in presets.values())
    lines = [f"{'preset':<18} {'env':<{width}} {'kind':<8} {'objective':<11} steps"]
    for name, config in presets.items():
        lines.append(
            f"{name:<18} {config.env:<{width}} {config.env_kind:<8} "
            f"{config.algorithm.objective:<11} {config.steps:,}"
        )
    return "\n".join(lines)


def list_keys() -> str:
    """The run's keys, then each objective's (`objective=NAME` chooses one), with defaults.

    The clipped objective's values are those `--set objective=clipped` gives the default
    run: the settings both objectives share keep the default run's values.
    """
    lines = ["# the run"]
    for name, value in configs.to_dict(configs.TrainConfig()).items():
        if name != "algorithm":
            lines.append(f"{name} = {value!r}")
    for objective in ("kl_penalty", "clipped"):
        config = configs.parse_override(configs.TrainConfig(), f"objective={objective}")
        kept = ", shared settings kept" if objective == "clipped" else ""
        lines.append(f"# objective={objective} (also as algorithm.KEY{kept})")
        algorithm = configs.to_dict(config)["algorithm"]
        lines += [f"{name} = {value!r}" for name, value in algorithm.items() if name != "objective"]
    return "\n".join(lines)


def requested_config(
    args: argparse.Namespace, base: configs.TrainConfig | None = None
) -> configs.TrainConfig:
    """The config the command line asks for: --config's preset (or `base`), --seed, --set."""
    try:
        config = configs.get(args.config) if args.config else base
        if args.seed is not None:
            config = configs.parse_override(config, f"seed={args.seed}")
        for assignment in args.set:
            config = configs.parse_override(config, assignment)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return config


def new_run(
    args: argparse.Namespace, timestamp: str | None = None
) -> tuple[pathlib.Path, configs.TrainConfig]:
    if not args.config:
        raise UsageError("give --config NAME for a new run (see --list), or --timestamp to resume")
    config = requested_config(args)
    _environments().check_env(config)  # Refused spaces leave no run folder behind.
    timestamp = timestamp or datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    rundir = pathlib.Path(args.logdir) / f"{timestamp}-{args.config}"
    rundir.mkdir(parents=True, exist_ok=False)
    text = yaml.safe_dump(configs.to_dict(config), sort_keys=False)
    temporary = rundir / f".{CONFIG_FILE}.tmp"
    temporary.write_text(text)
    temporary.replace(rundir / CONFIG_FILE)
    return rundir, config


def resumed_run(args: argparse.Namespace) -> tuple[pathlib.Path, configs.TrainConfig]:
    """The run --timestamp names, or a new one by that name when --config has none yet."""
    logdir = pathlib.Path(args.logdir)
    if args.config and not (logdir / f"{args.timestamp}-{args.config}" / CONFIG_FILE).exists():
        return new_run(args, args.timestamp)
    rundir = (
        logdir / f"{args.timestamp}-{args.config}"
        if args.config
        else find_run(logdir, args.timestamp)
    )
    saved = load_config(rundir)
    requested = requested_config(args, saved)
    asked, kept = configs.flat(requested), configs.flat(saved)
    differ = [
        f"{name}={asked.get(name)!r} (saved {kept.get(name)!r})"
        for name in {**kept, **asked}
        if asked.get(name) != kept.get(name)
    ]
    if differ:
        raise UsageError(
            f"run {rundir.name!r} was started with other settings: {', '.join(differ)}; "
            "resume it with the command that started it"
        )
    return rundir, saved


def find_run(logdir: pathlib.Path, timestamp: str) -> pathlib.Path:
    matches = sorted(logdir.glob(f"{timestamp}-*")) if logdir.is_dir() else []
    if not matches:
        raise UsageError(f"no run with timestamp {timestamp!r} in {str(logdir)!r} to resume")
    if len(matches) > 1:
        raise UsageError(f"several runs match timestamp {timestamp!r}: {matches}")
    return matches[0]


def load_run_config(rundir: pathlib.Path) -> configs.TrainConfig:
    """The config of the run folder `rundir`; a one-line UsageError when there is none."""
    if not rundir.is_dir():
        raise UsageError(f"run folder {str(rundir)!r} does not exist")
    return load_config(rundir)


def best_checkpoint(rundir: pathlib.Path) -> pathlib.Path:
    """The run's best-evaluated state (`best.bin`); a one-line UsageError when there is none."""
    from batchrl.training import checkpoint
    from batchrl.training import run as run_lib

    path = rundir / run_lib.CHECKPOINTS / checkpoint.BEST
    if not path.exists():
        raise UsageError(f"run folder {str(rundir)!r} has no best policy: no phase evaluated")
    return path


def load_config(rundir: pathlib.Path) -> configs.TrainConfig:
    path = rundir / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text())
        return configs.from_dict(data)
    except FileNotFoundError:
        raise UsageError(f"{str(path)!r} is missing: not a batchrl run folder") from None
    except (yaml.YAMLError, ValueError, TypeError, AttributeError) as error:
        first = str(error).splitlines()[0]
        raise UsageError(f"cannot read {str(path)!r}: {first}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = parse_args(argv)
    if args.list:
        print(list_presets())
        return 0
    if args.list_keys:
        print(list_keys())
        return 0
    try:
        if not args.logdir:
            raise UsageError("give --logdir DIR: the folder that holds the runs")
        if args.timestamp:
            rundir, config = resumed_run(args)
        else:
            rundir, config = new_run(args)
        if config.env_kind == "workers":
            xla_threads.limit()
        from batchrl.training import run as run_lib

        signal.signal(signal.SIGTERM, _interrupt)
        return run_lib.train(rundir, config)
    except UsageError as error:
        print(f"batchrl: error: {error}", file=sys.stderr)
        return 2
    except (
        ValueError,
        env_errors.EnvError,
        spec.UnsupportedSpaceError,
        FloatingPointError,
        MemoryError,
        _checkpoint_error(),
    ) as error:
        print(f"batchrl: error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1


def _environments() -> Any:
    from batchrl.training import environments  # Imports JAX: not for --list.

    return environments


def _checkpoint_error() -> type[Exception]:
    from batchrl.training import checkpoint

    return checkpoint.CheckpointError


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


if __name__ == "__main__":
    sys.exit(main())

"""Trains PPO on a preset: run folder, config as YAML, train and eval phases, checkpoints, logs.

    python -m batchrl.scripts.train --logdir runs --config pendulum [--seed 1] [--set k=v ...]
    python -m batchrl.scripts.train --logdir runs --timestamp 20261122T101500   # resume
    python -m batchrl.scripts.train --logdir runs --config pendulum --timestamp T  # start or resume
    python -m batchrl.scripts.train --logdir runs --config pendulum_jax --seeds 0 1 2  # together
    python -m batchrl.scripts.train --list

A new run goes to LOGDIR/<timestamp>-<config>/ (`training.run_folder`); the command is a
shell over the functions `batchrl.train` runs (`training.api`). As in the seed, adding
`--timestamp T` to the command that started a run resumes it (and starts run T-<config>
if there is none); a resume whose --config, --seed or --set, or hand edits of its config.yaml
(`training.session`), differ from the saved config names the keys and stops. It restores
the whole training state from the last good checkpoint (exact on JAX-native envs). Ctrl-C
or SIGTERM checkpoints the phase in flight and exits. Bad input: one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import shutil
import sys
from collections.abc import Sequence

import gymnasium as gym

from batchrl import configs
from batchrl.configs import train_config
from batchrl.envs import spaces
from batchrl.envs.host import errors as env_errors
from batchrl.scripts import command_line, exiting
from batchrl.training import (
    api,
    api_arguments,
    compile_signals,
    device_memory,
    file_writes,
    given_env,
    run_folder,
    run_signals,
    session,
    terminal,
)


class UsageError(Exception):
    """Bad input from the command line: reported as one line, exit status 2."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line.ArgumentParser(prog="batchrl", description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="folder that holds the runs")
    parser.add_argument(
        "--config",
        help="preset name (see --list), or a run folder or config YAML file to start from",
    )
    parser.add_argument(
        "--timestamp", help="resume the run with this timestamp (with --config: start it if new)"
    )
    parser.add_argument(
        "--seed", type=configs.overrides.seed_argument, help="run seed (new runs only)"
    )
    parser.add_argument(
        "--seeds",
        type=configs.overrides.seed_argument,
        nargs="+",
        metavar="SEED",
        help="train these seeds together in one program, a run folder each "
        "(<timestamp>-seed<seed>-<config>; a --timestamp with {seed} names them itself)",
    )
    configs.overrides.add_argument(parser)
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    parser.add_argument(
        "--list-keys",
        action="store_true",
        help="list the config keys, with --config's and --set's values, and exit",
    )
    args = configs.overrides.parse_args(parser, argv)
    if args.timestamp is not None and not args.timestamp.strip():  # Started a new run.
        parser.error(f"--timestamp names a run to start or resume, got {args.timestamp!r}")
    return args


def list_presets() -> str:
    presets = {name: make() for name, make in configs.PRESETS.items()}
    names = max(map(len, presets))
    width = max(len(config.env) for config in presets.values())
    lines = [f"{'preset':<{names}} {'env':<{width}} {'backend':<9} {'objective':<11} steps"]
    for name, config in presets.items():
        lines.append(
            f"{name:<{names}} {config.env:<{width}} {config.backend:<9} "
            f"{config.algorithm.objective:<11} {config.steps:,}"
        )
    return "\n".join(lines)


def _print_listing(text: str) -> int:
    """Prints a listing; a reader that stops early (`| head`) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # No error at exit.
    return 0


def list_keys(base: configs.TrainConfig | None = None, named: bool = True) -> str:
    """The run's keys, then each objective's (`objective=NAME` chooses one), with values.

    The values are `base`'s (the command's --config and --set), or the defaults, which
    `named=False` (no --config) says are no preset's. The other objective's are those
    `--set objective=NAME` gives it: the settings both objectives share keep `base`'s values.
    """
    lines = ["# the run"]
    if not named:  # Values no preset has: said so.
        lines[0] += " (no --config: the defaults of a TrainConfig, which no preset keeps)"
    base = base or configs.TrainConfig()
    for name, value in configs.to_dict(base).items():
        if name != "algorithm":
            lines.append(f"{name} = {value!r}")
    own = base.algorithm.objective
    switch = logging.getLogger("batchrl.configs")  # Its warning of what a switch drops.
    was, switch.disabled = switch.disabled, True  # Shown here, a switch nobody asked for.
    try:
        for objective in (own, *(name for name in ("kl_penalty", "clipped") if name != own)):
            kept = "" if objective == own else ", shared settings kept"
            try:
                config = configs.parse_override(base, f"objective={objective}")
            except ValueError as error:  # This run's settings need its own objective.
                config = configs.parse_override(configs.TrainConfig(), f"objective={objective}")
                kept = f", defaults: {exiting.first_line(error)}"
            lines.append(f"# objective={objective} (also as algorithm.KEY{kept})")
            algorithm = configs.to_dict(config)["algorithm"]
            lines += [
                f"{key} = {value!r}" for key, value in algorithm.items() if key != "objective"
            ]
    finally:
        switch.disabled = was
    return "\n".join(lines)


def requested_config(
    args: argparse.Namespace, base: configs.TrainConfig | None = None
) -> configs.TrainConfig:
    """The config the command line asks for: --config's preset (or `base`), --seed, --set."""
    for assignment in args.set if args.seed is not None else ():
        if assignment.partition("=")[0].strip() == "seed":  # The later won, unsaid.
            raise UsageError(
                f"give --seed or --set seed=..., not both: --seed {args.seed}, --set {assignment}"
            )
    try:
        config = api.named_config(args.config)[0] if args.config else base
        seed = [f"seed={args.seed}"] if args.seed is not None else []
        config = given_env.overridden(config, [*seed, *args.set])
    except ValueError as error:
        raise UsageError(str(error)) from None
    return config


def new_run(
    args: argparse.Namespace, timestamp: str | None = None
) -> tuple[pathlib.Path, configs.TrainConfig]:
    if not args.config:
        raise UsageError("give --config NAME for a new run (see --list), or --timestamp to resume")
    config = requested_config(args)
    try:
        config, rundir = api.start(config, config_name(args), args.logdir, timestamp)
    except FileExistsError as error:
        raise UsageError(f"run folder {error.filename!r} exists already") from None
    return rundir, config


def resumed_run(args: argparse.Namespace) -> tuple[pathlib.Path, configs.TrainConfig]:
    """The run --timestamp names, or a new one by that name when --config has none yet.

    Its saved config, but for `RESUME_MAY_CHANGE` settings that --set gives (--config's
    preset does not), and a budget `--set steps=N` raises (written into its config).
    """
    logdir = pathlib.Path(args.logdir)
    if args.config:
        try:
            rundir = logdir / run_folder.name(args.timestamp, config_name(args))
        except ValueError as error:
            raise UsageError(str(error)) from None
        if not (rundir / run_folder.CONFIG).exists():
            return new_run(args, args.timestamp)
    else:
        rundir = run_folder.find(logdir, args.timestamp)
    saved = load_config(rundir)
    requested = requested_config(args, saved)
    asked, kept = configs.flat(requested), configs.flat(saved)
    if requested.max_length > saved.max_length:  # The start may have taken the env's limit.
        asked["max_length"] = max_length_taken(requested)
    given = {train_config.bare_key(setting.partition("=")[0].strip()) for setting in args.set}
    anew = train_config.RESUME_MAY_CHANGE
    may_change = (*anew, "steps")  # Taken where --set gives them: --set steps=N raises it.
    differ = [
        f"{name}={asked[name]!r} (saved {kept[name]!r})"
        for name in kept  # Not another objective's own keys: `objective` says them.
        if name in asked and asked[name] != kept[name] and name not in may_change
    ]
    if differ:
        raise UsageError(
            f"run {rundir.name!r} was started with other settings: {', '.join(differ)}; "
            "a resume keeps them, and may raise steps and set "
            f"{', '.join(anew[:-1])} and {anew[-1]} anew; other settings train in "
            "another --logdir"
        )
    if "steps" in given and requested.steps != saved.steps:
        try:
            session.check_raised_budget(rundir.name, saved, requested.steps)
        except ValueError as error:
            raise UsageError(str(error)) from None
    changed = {name: asked[name] for name in may_change if name in given}
    return rundir, train_config.replace(saved, **changed)


def max_length_taken(config: configs.TrainConfig) -> int:
    """The `max_length` a run of `config` trains with: at most its env's own step limit.

    A run's start takes that limit (`environments.check_run`) and saves it, so the command
    that started the run, given again to resume it, asks for more than the folder holds.
    """
    api.limit_xla_threads(config)
    from batchrl.training import environments  # Starts JAX's backends: after the limit.

    limit = environments.env_limit(config)
    return config.max_length if limit is None else min(config.max_length, limit)


def load_config(rundir: pathlib.Path) -> configs.TrainConfig:
    """The config of the run folder `rundir`; a one-line UsageError when it cannot be read."""
    try:
        return run_folder.read_config(rundir)
    except run_folder.RunFolderError as error:
        raise UsageError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = parse_args(argv)
    if args.list:
        return _print_listing(list_presets())
    if args.list_keys:  # With the values --config and --set give.
        try:
            asked = requested_config(args, configs.TrainConfig())
            return _print_listing(list_keys(asked, named=bool(args.config)))
        except UsageError as error:
            print(f"batchrl: error: {error}", file=sys.stderr)
            return 2
    rundir, trained = None, False
    try:
        if not args.logdir:
            raise UsageError("give --logdir DIR: the folder that holds the runs")
        if args.seeds:
            return _train_together(args)
        before = _folders(args.logdir)
        with compile_signals.stopping():  # From its start: a Ctrl-C JAX drops is sent again.
            if args.timestamp:
                rundir, config = resumed_run(args)
            else:
                rundir, config = new_run(args)
            api.limit_xla_threads(config)  # A resumed run has not been through `api.start`.
            from batchrl.training import run  # Starts JAX's backends: after the thread limit.

            with run_folder.removed_if_refused([rundir] if rundir not in before else []):
                run.train(rundir, config)
                trained = True  # A signal from here on comes after its last phase.
        return 0
    except run_signals.Finished:  # A signal in its last phase: nothing to run again.
        return 0
    except KeyboardInterrupt:  # The run saved a checkpoint of its last logged state.
        if trained:
            return 0
        if rundir is not None:
            _say_if_nothing_saved([rundir])
        return exiting.INTERRUPTED
    except (UsageError, run_folder.RunFolderError) as error:
        print(f"batchrl: error: {error}", file=sys.stderr)
        return 2
    except (
        ValueError,
        env_errors.EnvError,
        spaces.UnsupportedSpaceError,
        gym.error.Error,  # An env's missing dependency (Box2D), say: Gymnasium's one line.
        FloatingPointError,
        MemoryError,
        _checkpoint_error(),
        file_writes.WriteError,  # A full disk, a read-only folder: the file and what to do.
    ) as error:
        said = env_errors.line_here(error) or exiting.first_line(error)  # An env's, as a worker's.
        print(f"batchrl: error: {said}", file=sys.stderr)
        return 1
    except Exception as error:  # XLA's allocator past the device's memory, or an env's here.
        message = device_memory.out_of_memory(error) or env_errors.line_here(error)
        if message is None:
            raise
        print(f"batchrl: error: {message}", file=sys.stderr)
        return 1


def config_name(args: argparse.Namespace) -> str | None:
    """The name part of --config's run folders (`name_of`); None without --config."""
    return name_of(args.config) if args.config else None


def name_of(config: str) -> str:
    """The name part of the run folders of `config`: the preset's, or the folder's or file's."""
    try:
        return api.named_config(config)[1]
    except ValueError as error:
        raise UsageError(str(error)) from None


def _seed_timestamp(timestamp: str, seed: int) -> str:
    try:
        return api_arguments.seed_timestamp(timestamp, seed)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _train_together(args: argparse.Namespace) -> int:
    """Trains --seeds together, each seed's run new or resumed as --timestamp says."""
    if args.seed is not None:
        raise UsageError(f"give --seed or --seeds, not both: --seed {args.seed}")
    for assignment in args.set:
        if assignment.partition("=")[0].strip() == "seed":
            raise UsageError(
                f"--set {assignment} would give every run one seed: choose them with --seeds"
            )
    try:
        api_arguments.check_seeds(args.seeds)
    except ValueError as error:
        raise UsageError(str(error).replace("seeds must", "--seeds must")) from None
    ones = [
        argparse.Namespace(**{**vars(args), "seed": seed, "seeds": None}) for seed in args.seeds
    ]
    with compile_signals.stopping():  # From its start: a Ctrl-C JAX drops is sent again.
        before = _folders(args.logdir)
        if args.timestamp:
            runs = []
            try:
                with terminal.said_once():  # A seed each, the warnings would be said again.
                    for one in ones:
                        one.timestamp = _seed_timestamp(args.timestamp, one.seed)
                        runs.append(resumed_run(one))
                api.say_overlap_together(runs[0][1])  # New folders skip `api.start_together`.
            except Exception:  # A seed refused: the folders made for the seeds before it go.
                for rundir, _ in runs:
                    if rundir not in before:
                        shutil.rmtree(rundir, ignore_errors=True)
                raise
        else:
            if not args.config:
                raise UsageError(
                    "give --config NAME for a new run (see --list), or --timestamp to resume"
                )
            first = requested_config(ones[0])  # Once: its warnings said once, not a seed each.
            seed_configs = [train_config.replace(first, seed=one.seed) for one in ones]
            seed_configs, rundirs = api.start_together(seed_configs, config_name(args), args.logdir)
            runs = list(zip(rundirs, seed_configs, strict=True))
        api.limit_xla_threads(runs[0][1])
        from batchrl.training import together_run  # Starts JAX's backends: after the limit.

        rundirs = [rundir for rundir, _ in runs]
        new = [rundir for rundir in rundirs if rundir not in before]
        try:
            with run_folder.removed_if_refused(new):
                together_run.train(rundirs, [config for _, config in runs])
        except KeyboardInterrupt:
            _say_if_nothing_saved(rundirs)
            raise
    return 0


def _say_if_nothing_saved(rundirs: list[pathlib.Path]) -> None:
    """Says so where an interrupted run's folders hold no row and no checkpoint yet."""
    if not any(run_folder.kept_anything(rundir) for rundir in rundirs):
        folders = ", ".join(str(rundir) for rundir in rundirs)
        terminal.say(f"interrupted before its first phase ended: nothing saved in {folders}\n")


def _folders(logdir: str) -> set[pathlib.Path]:
    """The run folders in `logdir` now: those a run makes later are new."""
    return set(pathlib.Path(logdir).iterdir()) if pathlib.Path(logdir).is_dir() else set()


def _checkpoint_error() -> type[Exception]:
    from batchrl.training import checkpoint

    return checkpoint.CheckpointError


if __name__ == "__main__":
    exiting.command(main)  # Also `python -m batchrl` and `batchrl`.

"""Evaluates a run's kept checkpoints on many episodes: one JSON line per checkpoint.

    python -m batchrl.scripts.evaluate --logdir runs/<timestamp>-<config> --episodes 64
    python -m batchrl.scripts.evaluate --logdir runs/seeds --best  # every run in it

Several run folders, or a folder of them (a `train --seeds` logdir), are evaluated one
after another, each row naming its "run".

Each checkpoint's policy acts as the run's evaluations did, with its mean action or, where
the run's config sets `eval_sample`, with actions sampled from it, in the run's own env (its
backend, its batch), every checkpoint from the same starting states (Gymnasium envs are
seeded again as the run seeded them), so differences between lines are the policies', not
the episodes'. A run's final return is one evaluation of its last policy; this says whether
that policy is its level or one step of a walk (a held-out Hopper seed's last policy gave
1,364-1,373 on 4 x 32 episodes). `--normalizer-from PHASE` evaluates each checkpoint's parameters
with the observation normaliser of another kept checkpoint, to tell which of the two a
phase's change of return came from. `--best` evaluates the run's best-evaluated policy
(`best.bin`), on many more episodes than chose it. `--repeats R` scores each checkpoint R
times on new episodes, to measure the evaluation's own noise. `--sample` draws the actions
from the policy's distribution, as training does, whatever the config says: whether a
fallen mean action is a fallen policy; `--mean-action` takes the mean action (the mode) on
a run that samples. Sampled rows carry "sampled": true. `--average-last K` scores the mean
of the parameters of each checkpoint's phase and the K - 1 kept before it, the final policy
a run with `average_last=K` would have ended with (`training.tail_average`). `--seed S`
starts the episodes where a run of seed S would start its evaluations, not where this run
did: whether a return holds on other starting states. Rows so scored carry their "seed".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
from collections.abc import Callable, Sequence

import gymnasium as gym

from batchrl.configs import TrainConfig, train_config
from batchrl.envs.host import errors as env_errors
from batchrl.scripts import action_choice, command_line, exiting, run_argument
from batchrl.scripts.train import UsageError
from batchrl.training import (
    checkpoint,
    environments,
    loop,
    placement,
    run_folder,
    session,
    tail_average,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line.ArgumentParser(
        prog="python -m batchrl.scripts.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=64,
        help="at least this many episodes per checkpoint, in whole rounds of the run's "
        "num_envs (default: 64)",
    )
    parser.add_argument(
        "--phases",
        type=int,
        nargs="+",
        help="the checkpoints to evaluate (default: every kept one)",
    )
    parser.add_argument(
        "--best",
        action="store_true",
        help="evaluate the run's best-evaluated policy (with --phases: as well)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="score each checkpoint this many times, each on new episodes",
    )
    parser.add_argument(
        "--normalizer-from",
        type=int,
        metavar="PHASE",
        help="evaluate with this kept checkpoint's observation normaliser",
    )
    parser.add_argument(
        "--average-last",
        type=int,
        default=1,
        metavar="K",
        help="average each checkpoint's parameters with those of the K - 1 kept phases before it",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="start the episodes as a run of this seed would (default: the run's own seed)",
    )
    action_choice.add(parser)
    folders = "run folders (DIR/<timestamp>-<config>), or the folders that hold them"
    return run_argument.parse(parser, argv, folders, many=True)


def evaluate(
    rundir: pathlib.Path,
    episodes: int,
    phases: Sequence[int] | None = None,
    normalizer_from: int | None = None,
    best: bool = False,
    repeats: int = 1,
    sample: bool | None = None,
    average_last: int = 1,
    each: Callable[[dict], None] | None = None,
    seed: int | None = None,
) -> list[dict]:
    """The mean return and length over at least `episodes` episodes of each checkpoint.

    `each` is called with each row as soon as it is made: a later checkpoint that fails
    to load then costs only its own rows. Of every kept checkpoint, one that does not
    load is skipped with a note (unless none before it loaded, and it is the last).

    The checkpoints are `phases` and, with `best`, the best-evaluated state; every kept
    checkpoint when neither is given. With `repeats` above 1, each checkpoint is scored
    that many times on new episodes (a line each, with its "repeat"): how far two
    evaluations of the same parameters differ. `sample` True scores sampled actions (rows
    carry "sampled": true), False the mean action, None as the run's `eval_sample` says.
    `average_last` K scores each phase's parameters averaged with the K - 1 kept phases'
    before it (rows carry "averaged"). `seed` starts every evaluation's episodes as a run
    of that seed would, its envs seeded and its keys drawn from it (rows carry "seed").
    """
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}")
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    try:
        config = read = run_folder.read_config(rundir)
    except run_folder.RunFolderError as error:
        raise UsageError(str(error)) from None
    config = here(config)
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
            raise UsageError(f"--seed must be a whole number in [0, 2**31), got {seed!r}")
        config = train_config.replace(config, seed=seed)
    if normalizer_from is not None and not config.algorithm.normalize_observations:
        raise UsageError(
            f"--normalizer-from swaps the observation normaliser, and run folder {str(rundir)!r}"
            " trained without one (normalize_observations=False)"
        )
    directory = run_folder.checkpoints(rundir)
    kept = checkpoint.steps(directory)
    if not kept and not (best and not phases):  # `best.bin` alone needs no other.
        raise UsageError(f"run folder {str(rundir)!r} has no checkpoint yet")
    if average_last < 1:
        raise UsageError(f"--average-last must be at least 1, got {average_last}")
    if average_last > 1 and best:
        raise UsageError("--average-last averages kept phases; it does not apply to --best")
    if average_last > 1 and config.average_last > 1:
        raise UsageError(
            f"run folder {str(rundir)!r} trained with average_last={config.average_last}: "
            "its final checkpoint is already averaged"
        )
    wanted = list(phases or ([] if best else kept))
    for phase in [*wanted, *([normalizer_from] if normalizer_from is not None else [])]:
        if phase not in kept:
            raise UsageError(f"no checkpoint of phase {phase} in {str(rundir)!r}: it keeps {kept}")
    lacking = {
        phase: [p for p in _averaged_with(phase, average_last) if p not in kept] for phase in wanted
    }
    if not phases and any(lacking.values()) and not all(lacking.values()):
        # Every kept phase by default: the oldest lack the phases before them, kept no more.
        wanted = [phase for phase in wanted if not lacking[phase]]
        lacks = "; ".join(f"phase {p} lacks {m}" for p, m in lacking.items() if m)
        print(
            f"evaluate: note: --average-last {average_last} scores phases {wanted}, whose "
            f"{average_last - 1} phase(s) before are kept too ({lacks})",
            file=sys.stderr,
        )
    for phase in wanted:
        if lacking[phase]:
            raise UsageError(
                f"--average-last {average_last} at phase {phase} needs phases {lacking[phase]}, "
                f"and {str(rundir)!r} keeps {kept}"
            )
    paths = [checkpoint.path_for(directory, phase) for phase in wanted]
    if best:
        try:
            paths.append(run_folder.best(rundir))
        except run_folder.RunFolderError as error:
            raise UsageError(str(error)) from None
    # The envs the run's evaluations stepped: its own eval envs (Atari's whole games), or
    # its training envs.
    env, batch_env = environments.build_eval(config) or environments.build(config)
    sample = config.eval_sample if sample is None else sample
    try:
        config = dataclasses.replace(config, eval_sample=sample)
        programs = loop.make_programs(config, env)
        # The state the checkpoints fill: its agent made as zeros, no init compiled.
        state = loop.initial_state(programs, config, env, fresh_agent=False)

        def load(path: pathlib.Path):
            try:
                with session.edits_named(rundir, read):
                    return loop.place(programs, checkpoint.load(path, state))
            except checkpoint.CheckpointError:
                if path.exists() or not run_folder.busy(rundir):
                    raise
                raise checkpoint.CheckpointError(  # Listed, then dropped as the run kept newer.
                    f"{path} was removed as the run trains on (keep_checkpoints): evaluate its "
                    "phases still kept, or evaluate once it ends"
                ) from None

        obs_norm = None
        if normalizer_from is not None:
            obs_norm = load(checkpoint.path_for(directory, normalizer_from)).agent.learner.obs_norm
        rows = []
        for number, path in enumerate(paths):
            try:
                saved = load(path)
            except checkpoint.CheckpointError as error:
                # Every kept phase asked: one that does not load costs its rows, not the rest.
                if (
                    phases
                    or path.name == checkpoint.BEST
                    or (number == len(paths) - 1 and not rows)
                ):
                    raise
                print(f"evaluate: note: {error}; skipped", file=sys.stderr)
                continue
            agent = saved.agent
            if average_last > 1:
                earlier = [
                    load(checkpoint.path_for(directory, p)).agent
                    for p in _averaged_with(int(saved.phases), average_last)
                ]
                agent = tail_average.averaged(agent, [tail_average.params(a) for a in earlier])
            if obs_norm is not None:
                learner = dataclasses.replace(agent.learner, obs_norm=obs_norm)
                agent = dataclasses.replace(agent, learner=learner)
            if batch_env is not None:  # Gymnasium envs: the same starting states each time.
                batch_env.reset(seed=env.env_seeds)
            eval_state = state.eval
            for repeat in range(repeats):
                eval_state, summary = loop.evaluate(programs, eval_state, agent, episodes)
                row = {"run": rundir.name, "phase": int(saved.phases)}
                row["env_steps"] = int(saved.env_steps)
                if path.name == checkpoint.BEST:
                    row["best"] = True
                if normalizer_from is not None:
                    row["normalizer_from"] = normalizer_from
                if repeats > 1:
                    row["repeat"] = repeat
                if sample:
                    row["sampled"] = True
                if seed is not None:
                    row["seed"] = seed
                if average_last > 1:
                    row["averaged"] = len(_averaged_with(int(saved.phases), average_last)) + 1
                row |= {
                    "episodes": int(summary["episode/count"]),
                    "return": summary["episode/return"],
                    "length": summary["episode/length"],
                }
                rows.append(row)
                if each is not None:
                    each(row)
        return rows
    finally:
        if batch_env is not None:
            batch_env.close()


def _averaged_with(phase: int, average_last: int) -> range:
    """The phases before `phase` that its `average_last` mean takes in, as training does.

    A run with fewer phases before its last than `average_last` - 1 averages those it has:
    phase 1 is the first a run keeps, so a mean never reaches back past it.
    """
    return range(max(1, phase - average_last + 1), phase)


def here(config: TrainConfig) -> TrainConfig:
    """`config` with a device this machine lacks (a run trained on a GPU) as its default.

    Scoring a policy needs no particular device: a GPU run was refused on a CPU machine,
    its advice (set device=cpu) a setting `evaluate` takes none of.
    """
    for name in ("device", "acting_device"):
        value = getattr(config, name)
        try:
            placement.device(value, name)
        except ValueError:
            note = f"evaluate: note: the run's {name}={value!r} is not here; on JAX's default"
            print(note, file=sys.stderr)
            config = dataclasses.replace(config, **{name: "auto"})
    # Scoring updates nothing: the devices a run's update split its minibatches over
    # need not be here.
    return train_config.replace(config, learner_devices=1)


def _runs(given: Sequence[str]) -> list[pathlib.Path]:
    """The run folders given, each folder of run folders (a `--seeds` logdir) as its runs."""
    runs = []
    for path in map(pathlib.Path, given):
        holds = path.is_dir() and not (path / run_folder.CONFIG).exists()
        runs.extend((holds and run_folder.runs_in(path)) or [path])  # Else its one-line error.
    return runs


class OutputError(Exception):
    """The rows could not be written where the command's output goes (a full disk)."""


def print_row(row: dict) -> None:
    """Prints one JSON row, or raises OutputError naming why it could not."""
    try:
        print(json.dumps(row), flush=True)
    except OSError as error:
        # Python's exit would flush what is left again, and say so in a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OutputError(f"cannot write its rows: {error.strerror or error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for rundir in _runs(args.logdir):
            evaluate(
                rundir,
                args.episodes,
                args.phases,
                args.normalizer_from,
                args.best,
                args.repeats,
                action_choice.chosen(args),
                args.average_last,
                each=print_row,
                seed=args.seed,
            )
    except KeyboardInterrupt:  # The rows printed stand; the envs are closed.
        print("evaluate: interrupted", file=sys.stderr)
        return exiting.INTERRUPTED
    except UsageError as error:
        print(f"evaluate: error: {error}", file=sys.stderr)
        return 2
    except OutputError as error:  # The rows printed before it stand.
        print(f"evaluate: error: {error}", file=sys.stderr)
        return 1
    except checkpoint.CheckpointError as error:  # Corrupt, or not this run's.
        print(f"evaluate: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, gym.error.Error, env_errors.EnvError) as error:
        # The run's env not found here (its module not importable, an id registered by a
        # script), or failing: one line, as the train command says it.
        print(f"evaluate: error: {exiting.first_line(error)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exiting.command(main)

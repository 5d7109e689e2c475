"""Runs presets x seeds to their budget, each a normal run folder, and prints one JSON line a run.

    python -m batchrl.scripts.sweep --logdir runs/sweep --configs cheetah_clipped walker_clipped
        --seeds 0 1 2 [--steps 1000000] [--set key=value ...] [--together]

Run (config, seed) lives in LOGDIR/seed<seed>-<config>/ (a CONFIG given as a run folder
or YAML file is named as its runs are), trained by the train command with `--timestamp
seed<seed>`: a sweep stopped at any moment and run again skips finished runs (trained on
to a raised `--steps`) and resumes the others. Each config's settings and seeds, and the
settings of its runs already in LOGDIR, are checked before the first run trains. A run
another process trains is left to it, said, and the sweep exits with status 75
(`SKIPPED`), as its line is missing. Each run's line (stdout, and appended to
LOGDIR/results.jsonl) gives its evaluation curve, the final policy's return (of the mean
action, or sampled ones with `eval_sample`: "sampled": true), the mean of the last 5
evaluations, wall-clock, env-steps/s, the machine and the versions. The train command's
stdout goes to LOGDIR/seed<seed>-<config>.log, its warnings and errors to the sweep's
stderr; XLA's compiled programs to a cache of the sweep's own (`compilation_cache`).
`--evaluate-best N` also evaluates each run's best-evaluated policy (`best.bin`) on N
episodes, as `evaluate --best` does, into `kept_best_return` and its phase and episodes.
`--together` trains each config's unfinished seeds together in one program (`--seeds`),
into the same folders, their lines with "seeds_together" and the shared wall-clock, the
output in LOGDIR/seeds<s>_<s>...-<config>.log.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from batchrl import configs
from batchrl.scripts import command_line, evaluate, exiting, json_lines, provenance, train
from batchrl.training import checkpoint, file_writes, results, run_folder, terminal, together_checks

RESULTS = "results.jsonl"
# The exit status of a sweep that left runs to another process: sysexits' "try again later".
SKIPPED = os.EX_TEMPFAIL
KEPT = ("kept_best_return", "kept_best_phase", "kept_best_episodes")  # --evaluate-best's.
CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"  # JAX reads its persistent cache's folder here.


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line.ArgumentParser(
        prog="python -m batchrl.scripts.sweep", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--logdir", required=True, help="folder that holds the sweep's runs")
    parser.add_argument(
        "--configs",
        nargs="+",
        required=True,
        metavar="CONFIG",
        help="presets' names, or run folders or config YAML files to start from",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=configs.overrides.seed_argument,
        default=[0],
        metavar="SEED",
        help="a run each (default: 0)",
    )
    parser.add_argument(
        "--steps",
        type=configs.overrides.steps_argument,
        help="budget of env steps, 1e6 too (default: the preset's)",
    )
    configs.overrides.add_argument(parser)
    together = "train each config's seeds together in one program"
    parser.add_argument("--together", action="store_true", help=together)
    parser.add_argument(
        "--evaluate-best",
        type=int,
        metavar="EPISODES",
        help="evaluate each run's best-evaluated policy on this many episodes",
    )
    args = configs.overrides.parse_args(parser, argv)
    if args.evaluate_best is not None and args.evaluate_best < 1:
        parser.error(f"--evaluate-best takes episodes, at least 1: got {args.evaluate_best}")
    keys = {
        assignment.partition("=")[0].strip().removeprefix("algorithm.") for assignment in args.set
    }
    if "seed" in keys:
        parser.error("--set seed=... would give every run one seed: choose them with --seeds")
    for option, given, each in (("seeds", args.seeds, "folder"), ("configs", args.configs, "run")):
        if twice := sorted({value for value in given if given.count(value) > 1}):
            parser.error(f"--{option} must be distinct {option} (a {each} each), got {twice} twice")
    by_name = collections.defaultdict(list)  # Two files of one name make one folder a seed.
    for config in args.configs:
        with contextlib.suppress(train.UsageError):  # Named with its error at its run.
            by_name[train.name_of(config)].append(config)
    for name, given in ((name, given) for name, given in by_name.items() if len(given) > 1):
        parser.error(
            f"--configs {' and '.join(given)} both name their runs {name!r} "
            f"(seed{args.seeds[0]}-{name}): give each config file its own name"
        )
    if "steps" in keys and args.steps is not None:
        parser.error("--steps and --set steps=... both set the budget: give one")
    if pathlib.Path(args.logdir).exists() and not pathlib.Path(args.logdir).is_dir():
        parser.error(f"--logdir {args.logdir} is a file, not a folder of runs")
    if (pathlib.Path(args.logdir) / run_folder.CONFIG).is_file():  # Its lines went in there.
        parser.error(f"--logdir {args.logdir} is a run's folder: give the folder of its runs")
    return args


def train_argv(args: argparse.Namespace, config: str, seeds: Sequence[int]) -> list[str]:
    """The train command's arguments for the sweep's run of `seeds` (together when several)."""
    budget = [] if args.steps is None else ["--set", f"steps={args.steps}"]
    overrides = [item for assignment in args.set for item in ("--set", assignment)]
    if len(seeds) == 1:
        chosen = ["--seed", str(seeds[0]), "--timestamp", f"seed{seeds[0]}"]
    else:
        chosen = ["--seeds", *map(str, seeds), "--timestamp", "seed{seed}"]
    return ["--logdir", args.logdir, "--config", config, *chosen, *budget, *overrides]


def rundir_of(args: argparse.Namespace, config: str, seed: int) -> pathlib.Path:
    """The folder of the sweep's run (config, seed)."""
    return pathlib.Path(args.logdir) / run_folder.name(f"seed{seed}", train.name_of(config))


def log_of(args: argparse.Namespace, config: str, seeds: Sequence[int]) -> pathlib.Path:
    """The file the train command's output for `seeds` goes to.

    LOGDIR/seed<s>-<config>.log for one seed, seeds<s>_<s>...-<config>.log for seeds
    together; seeds<first>_..._<last>-<config>.log where the whole list would pass the
    255 bytes a file system allows a name (100 seeds from 0 take 290).
    """
    rundir = rundir_of(args, config, seeds[0])
    if len(seeds) == 1:
        return rundir.parent / f"{rundir.name}.log"
    config = train.name_of(config)  # A run folder's or a YAML file's: its runs' name.
    name = f"seeds{'_'.join(map(str, seeds))}-{config}.log"
    if len(name.encode()) > 255:
        name = f"seeds{seeds[0]}_..._{seeds[-1]}-{config}.log"
    return rundir.parent / name


def run_one(
    args: argparse.Namespace, config: str, seeds: Sequence[int], cache: str | None = None
) -> tuple[int, float | None, list[int]]:
    """Trains the runs of `seeds` to their budget unless finished.

    Several seeds train together, in one train command (`--seeds`). `cache`: a folder
    for XLA's compiled programs, which the run reads and adds to. Returns the exit
    status, the seconds it took (None when none was left to train) and the seeds trained.
    """
    unfinished = []
    for seed in seeds:
        done = results.read(rundir_of(args, config, seed))
        if done.finished and results.checkpointed(rundir_of(args, config, seed)):
            # Refuses a finished run of other settings; one of a raised budget trains on.
            _, asked = train.resumed_run(train.parse_args(train_argv(args, config, [seed])))
            if done.env_steps < asked.shape.steps:
                unfinished.append(seed)
        elif run_folder.busy(rundir_of(args, config, seed)):  # A second sweep, say.
            print(
                f"sweep: {rundir_of(args, config, seed)} is being trained by another "
                "process: skipped; run the sweep again once that ends for its line",
                file=sys.stderr,
            )
        else:
            unfinished.append(seed)
    if not unfinished:
        return 0, None, []
    argv = train_argv(args, config, unfinished)
    log = log_of(args, config, unfinished)
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("a")
    except OSError as error:  # A read-only or full disk.
        raise file_writes.write_error(log, error, started=False) from None
    start = time.perf_counter()
    with out:
        # Its own process group, so a Ctrl-C reaches it once, through us; SIGTERM if we die.
        env = exiting.with_parent()
        process = subprocess.Popen(
            [sys.executable, "-m", "batchrl.scripts.train", *argv],
            env={**env, CACHE_VARIABLE: cache} if cache else env,
            stdout=out,
            process_group=0,
        )
        try:
            code = process.wait()
        except KeyboardInterrupt as interrupt:  # The run saves its checkpoint and exits.
            # The signal the sweep got: a background sweep (`nohup ... &`), whose runs ignore
            # SIGINT, gets no Ctrl-C either, only SIGTERM. The run ends its phase first; a
            # second Ctrl-C passes on, and the run stops at once.
            while True:
                process.send_signal(getattr(interrupt, "signum", signal.SIGINT))
                try:
                    process.wait()
                    break
                except KeyboardInterrupt as again:
                    interrupt = again
            raise
    return code, round(time.perf_counter() - start, 1), unfinished


def result_line(
    args: argparse.Namespace,
    config: str,
    seed: int,
    seconds: float | None,
    together: int | None,
    about: dict[str, Any],
    commit: str | None,
) -> str:
    """The JSON line of the sweep's run (config, seed); `together`: the seeds it trained with."""
    rundir = rundir_of(args, config, seed)  # Named `seed<seed>-<name_of(config)>`.
    kept = kept_best(rundir, args.evaluate_best) if args.evaluate_best else {}
    line = results.line(rundir)  # Its config's name, seed, results, "sampled", settings.
    return json.dumps(
        {
            **line,
            **kept,
            "seconds_this_invocation": seconds,
            **({"seeds_together": together} if together else {}),
            "machine": about,
            "commit": line.get("commit", commit),  # The folder's: the code that trained it.
        }
    )


def kept_best(rundir: pathlib.Path, episodes: int) -> dict[str, Any]:
    """The return of the run's best-evaluated policy on `episodes` episodes, and its phase."""
    (row,) = evaluate.evaluate(rundir, episodes, best=True)
    return {
        "kept_best_return": row["return"],
        "kept_best_phase": row["phase"],
        "kept_best_episodes": row["episodes"],
    }


@contextlib.contextmanager
def compilation_cache() -> Iterator[str | None]:
    """A folder the sweep's runs keep XLA's compiled programs in, removed after the sweep.

    A preset's seeds compile the same programs (a seed is data to them, not code): each
    run after the first reads them instead of compiling its own (a `pendulum_jax` run
    compiles for about 10 s of its start on a 2-core machine). A cache the caller named
    (JAX_COMPILATION_CACHE_DIR) is used as it is, and kept.
    """
    if os.environ.get(CACHE_VARIABLE):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="batchrl-sweep-xla-") as directory:
        yield directory


class _Signalled(KeyboardInterrupt):
    """A stop by a signal other than Ctrl-C's, which reaches Python as a plain one."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signal.Signals(signum)


def _interrupt(signum: int, frame: Any) -> None:
    raise _Signalled(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the sweep; returns 0, the first failed run's exit status, or `SKIPPED`."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    about = provenance.machine()
    commit = provenance.source_commit()
    groups = [
        (config, args.seeds if args.together else [seed])
        for config in args.configs
        for seed in (args.seeds[:1] if args.together else args.seeds)
    ]
    try:  # Every config, seed and setting checked before any run trains.
        for config in args.configs:
            check_runs(args, config)
    except (train.UsageError, ValueError) as error:
        print(f"sweep: error: {error}", file=sys.stderr)
        return 2
    try:
        with compilation_cache() as cache:
            return _sweep(args, groups, about, commit, cache)
    except file_writes.WriteError as error:  # A read-only or full disk: a run's log, the lines.
        print(f"sweep: error: {error}", file=sys.stderr)
        return 1


def check_runs(args: argparse.Namespace, config: str) -> None:
    """A one-line UsageError or ValueError for a seed of `config` the sweep cannot train.

    Each seed's config (a seed out of range, say), and with --together whether the
    seeds can train together (not Atari's batch): found before the first run trains,
    not hours later at that seed's turn.
    """
    configs = [
        train.requested_config(train.parse_args(train_argv(args, config, [seed])))
        for seed in args.seeds
    ]
    if args.together and len(configs) > 1:
        together_checks.check_configs(configs)
    # Its runs in the logdir, of any seed: a new seed's run of other settings was let in.
    name = re.compile(rf"seed(\d+)-{re.escape(train.name_of(config))}")
    for folder in sorted(pathlib.Path(args.logdir).glob("seed*")):
        if (found := name.fullmatch(folder.name)) and (folder / run_folder.CONFIG).is_file():
            train.resumed_run(train.parse_args(train_argv(args, config, [int(found.group(1))])))


def _sweep(
    args: argparse.Namespace,
    groups: Sequence[tuple[str, Sequence[int]]],
    about: dict[str, Any],
    commit: str | None,
    cache: str | None,
) -> int:
    """Trains each group of (config, seeds) in turn and prints their lines; `main`'s status.

    `SKIPPED` where another process trained some run, whose line is then missing.
    """
    skipped = 0
    for config, seeds in groups:
        try:
            code, seconds, trained = run_one(args, config, seeds, cache)
        except train.UsageError as error:
            print(f"sweep: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("sweep: interrupted; run it again to resume", file=sys.stderr)
            return 130
        failed = None  # Its seeds that finished still get their lines (one diverged, say).
        if code != 0:
            named = " ".join(map(str, seeds)) if len(seeds) <= 20 else f"{seeds[0]} ... {seeds[-1]}"
            said = f"exited with {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
            print(f"sweep: error: {config} seed {named} {said}", file=sys.stderr)
            failed = code if code > 0 else 128 - code  # A shell's status for a signal.
        try:
            written = json_lines.written(pathlib.Path(args.logdir) / RESULTS)
        except ValueError as error:  # A line other than the last that is not JSON.
            print(f"sweep: error: {error}", file=sys.stderr)
            return 2
        for seed in seeds:
            rundir = rundir_of(args, config, seed)
            done = results.read(rundir)
            if failed is not None and not _to_budget(rundir, done):
                continue  # Not trained, or finished at a budget the failed command raised.
            if seed not in trained and not done.finished:
                skipped += 1  # Another process trains it.
                continue
            together = len(trained) if seed in trained and len(trained) > 1 else None
            took = seconds if seed in trained else None
            try:
                line = result_line(args, config, seed, took, together, about, commit)
            except train.UsageError as error:
                print(f"sweep: error: {error}", file=sys.stderr)
                return 2
            except checkpoint.CheckpointError as error:  # --evaluate-best's best.bin.
                print(f"sweep: error: {error}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:  # In --evaluate-best: its line comes with the rerun.
                print("sweep: interrupted; run it again to resume", file=sys.stderr)
                return 130
            print(line, flush=True)
            # A run finished by a sweep stopped before its line was written gets it now,
            # and one evaluated again (--evaluate-best) a line with its kept best's return.
            before = written.get((train.name_of(config), seed))
            new = json.loads(line)
            stale = before is None or any(before.get(k) != new[k] for k in KEPT if k in new)
            if seed in trained or stale:  # A full disk: the line is printed above.
                json_lines.append(pathlib.Path(args.logdir) / RESULTS, line)
        if failed is not None:
            return failed
    if skipped:
        print(
            f"sweep: {terminal.counted(skipped, 'run')} left to another process, without "
            f"a line: run the sweep again once it ends (exit status {SKIPPED})",
            file=sys.stderr,
        )
        return SKIPPED
    return 0


def _to_budget(rundir: pathlib.Path, done: results.Summary) -> bool:
    """Whether the run in `rundir` finished the budget its folder's config now holds."""
    if not done.finished or not results.checkpointed(rundir):  # Not trained, say.
        return False
    return done.env_steps >= run_folder.read_config(rundir).steps


if __name__ == "__main__":
    sys.exit(main())

"""N seeds of a preset trained together against one seed alone and N one after another.

Each command runs in a fresh process, as a user runs it, so every wall time counts its
start, compiles and evaluations: the train command with `--seeds 0 .. N-1` (one program,
`training.together`), the same with `--seed 0` alone, and, with `--after-another K`, seeds
0 .. K-1 one after another. The one-after-another time of N seeds is measured where
K = N, and otherwise estimated as N times the solo run's (the line says which). Prints
one JSON line, with every seed's final return and the seconds of the first seed's train
phases, the first (its compile) apart: the together phases over N solo runs' says how
much of a phase's work the seeds share.

    python benchmarks/seeds_together.py                       # 10 seeds of pendulum_jax
    python benchmarks/seeds_together.py --preset breakout_minatar --steps 10000000
    python benchmarks/seeds_together.py --seeds 3 --after-another 3 --steps 60000
    python benchmarks/seeds_together.py --quick               # checks that it runs
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import accelerator_check

from batchrl import configs
from batchrl.scripts import exiting
from batchrl.training import metrics_log, results, run_folder


def timed_train(
    logdir: pathlib.Path,
    preset: str,
    chosen: list[str],
    settings: list[str],
    stamp: str | None = None,
) -> float:
    """Seconds the train command takes to run `preset` with `chosen` seed arguments.

    `stamp` names the run folder (default `s` and the seed); a folder trained to its
    budget already is read in a few seconds, not trained again.
    """
    if stamp is None:
        stamp = "s{seed}" if chosen[0] == "--seeds" else f"s{chosen[1]}"
    argv = [sys.executable, "-m", "batchrl.scripts.train", "--logdir", str(logdir)]
    argv += ["--config", preset, *chosen, "--timestamp", stamp]
    for setting in settings:
        argv += ["--set", setting]
    start = time.perf_counter()
    done = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=exiting.with_parent(),
    )
    if done.returncode != 0:  # The train command's own one line says why.
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        script = pathlib.Path(sys.argv[0]).stem  # This script, or one that calls this.
        sys.exit(f"{script}: {preset} {' '.join(chosen)} failed: {last}")
    return round(time.perf_counter() - start, 2)


def final_returns(logdir: pathlib.Path) -> dict[str, float]:
    """Each run folder's final return, by folder name."""
    return {
        folder.name: results.read(folder).final_return
        for folder in sorted(logdir.iterdir())
        if folder.is_dir()
    }


def phase_seconds(logdir: pathlib.Path) -> dict[str, float]:
    """Seconds the first run folder under `logdir` spent in its train phases, its first apart.

    The first phase's count holds the phase's compile; the others are the phases' own
    work, which seeds together share out or add up (their rows say the together phase's).
    """
    folder = next(folder for folder in sorted(logdir.iterdir()) if folder.is_dir())
    seconds = [
        row["perf/train_seconds"] for row in metrics_log.read_jsonl(run_folder.metrics(folder))
    ]
    return {"first": round(seconds[0], 2), "others": round(sum(seconds[1:]), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum_jax")
    parser.add_argument("--seeds", type=int, default=10, help="N, the seeds trained together")
    parser.add_argument("--steps", type=int, help="each seed's budget (default: the preset's)")
    parser.add_argument("--after-another", type=int, default=0, metavar="K")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="tiny runs, to check it works")
    args = parser.parse_args()
    if not 0 <= args.after_another <= args.seeds:
        parser.error(f"--after-another must be 0..--seeds ({args.seeds}), got {args.after_another}")
    exiting.sigterm_exits()  # `timeout`'s SIGTERM: the run stopped, its folder removed.
    settings = []
    if args.quick:
        args.seeds, args.after_another = 2, 2
        settings += ["num_envs=4", "max_length=50", "final_episodes=4", "eval_episodes=4"]
        if configs.get(args.preset).algorithm.objective == "kl_penalty":
            settings += ["update_every=4"]
        else:  # The clipped objective: an update every 32 env steps.
            settings += ["steps_per_update=8", "num_minibatches=2", "update_epochs=2"]
        args.steps = 400
    if args.steps is not None:
        settings.append(f"steps={args.steps}")
    # One value a key, the user's --set over these: `--quick --set num_envs=8` trains 8.
    keyed = {setting.partition("=")[0]: setting for setting in [*settings, *args.set]}
    settings = list(keyed.values())
    seeds = [str(seed) for seed in range(args.seeds)]
    with tempfile.TemporaryDirectory() as folder:
        root = pathlib.Path(folder)
        together = timed_train(root / "together", args.preset, ["--seeds", *seeds], settings)
        solo = timed_train(root / "solo", args.preset, ["--seed", "0"], settings)
        phases_together = phase_seconds(root / "together")
        phases_solo = phase_seconds(root / "solo")
        after = [solo]
        for seed in range(1, args.after_another):
            after.append(timed_train(root / "solo", args.preset, ["--seed", str(seed)], settings))
        measured = len(after) >= args.seeds
        one_after_another = round(sum(after) if measured else args.seeds * solo, 2)
        line = {
            "benchmark": "seeds_together",
            "preset": args.preset,
            "seeds": args.seeds,
            "settings": settings,
            "together_seconds": together,
            "one_seed_seconds": solo,
            "one_after_another_seconds": one_after_another,
            "one_after_another": "measured" if measured else "estimated as N x one seed",
            "solo_seconds_each": after,
            "together_to_one_seed": round(together / solo, 3),
            "together_to_one_after_another": round(together / one_after_another, 3),
            "phase_seconds_together": phases_together,
            "phase_seconds_one_seed": phases_solo,
            # Near 1, the seeds' phases cost what N solo runs' do: nothing shared but the start.
            "together_phases_to_n_solo_phases": (
                round(phases_together["others"] / (args.seeds * phases_solo["others"]), 3)
                if phases_solo["others"]
                else None  # A budget of one phase: nothing after the compile's.
            ),
            "final_returns_together": final_returns(root / "together"),
            "final_returns_solo": final_returns(root / "solo"),
            "versions": accelerator_check.versions(),
            "commit": accelerator_check.commit(),
        }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

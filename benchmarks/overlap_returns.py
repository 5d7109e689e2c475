"""What acting one policy version behind does to learning: a preset's seeds, overlap off and on.

Each seed trains to the preset's budget with `overlap=off`, then with `overlap=on`, each
a train command in a fresh process and a run folder under `--logdir` named `off_s0`,
`on_s0`, ...: a folder trained to its budget is read, not trained again, and a stopped
one resumes. Prints one JSON line, its `results` a setting each, with lists over the
seeds: the final return, the first evaluation's, and the mean over the run's updates of
their KL from the learner's policy at each update's start and of their clip fraction,
the size of the step each update took.

    python benchmarks/overlap_returns.py --logdir runs/overlap                  # cheetah_clipped
    python benchmarks/overlap_returns.py --logdir runs/overlap --preset hopper_clipped \
        --seeds 0 1 --set backend=mujoco
    python benchmarks/overlap_returns.py --logdir /tmp/o --quick               # checks that it runs

`--set key=value` adds a setting to every run, after `core_scaling`'s defaults
(`backend=mujoco` for cheetah_clipped and humanoid_clipped).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import accelerator_check
import core_scaling
import seeds_together

from batchrl.scripts import exiting
from batchrl.training import metrics_log, results, run_folder, session


def summary(folders: list[pathlib.Path]) -> dict:
    """Each run's final and first evaluated returns, and its updates' mean KL and clip fraction."""
    runs = []
    for folder in folders:
        rows = metrics_log.read_jsonl(run_folder.metrics(folder))
        updates = [row for row in rows if "train/kl" in row]
        first = next(row for row in rows if row.get("eval/return") is not None)
        runs.append({
            "trained_at": session.commit_of(folder),  # The commit that last trained it.
            "final_return": round(results.read(folder).final_return, 2),
            "first_eval_step": first["step"],
            "first_eval_return": round(first["eval/return"], 2),
            "mean_kl": round(statistics.mean(row["train/kl"] for row in updates), 4),
            "mean_clip_fraction": round(
                statistics.mean(row["train/clip_fraction"] for row in updates), 3
            ),
        })  # fmt: skip
    return {name: [run[name] for run in runs] for name in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True, help="folder of the run folders, kept")
    parser.add_argument("--preset", default="cheetah_clipped")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="tiny runs, to check it works")
    args = parser.parse_args()
    exiting.sigterm_exits()  # `timeout`'s SIGTERM: the run stopped, resumable.
    base = dict(core_scaling.DEFAULTS.get(args.preset, {}))
    if args.quick:
        args.seeds = [0]
        base.update(accelerator_check.QUICK.get(args.preset, {"num_envs": 4}))
        base.update(eval_episodes=1, final_episodes=1, steps=base.get("phase_steps", 2048) * 3)
    base.update(dict(text.partition("=")[::2] for text in args.set))
    logdir = pathlib.Path(args.logdir) / args.preset
    folders: dict[str, list[pathlib.Path]] = {"off": [], "on": []}
    for seed in args.seeds:
        for setting in ("off", "on"):
            stamp = f"{setting}_s{seed}"
            settings = [f"{key}={value}" for key, value in {**base, "overlap": setting}.items()]
            seeds_together.timed_train(logdir, args.preset, ["--seed", str(seed)], settings, stamp)
            folders[setting].append(next(logdir.glob(f"{stamp}-*")))
    summaries = [{"overlap": name, **summary(runs)} for name, runs in folders.items()]
    line = {
        "benchmark": "overlap_returns",
        "preset": args.preset,
        "settings": base,
        "seeds": args.seeds,
        "results": summaries,
        # Each seed's final return with overlap over its return without.
        "on_over_off": [
            round(on / off, 3) if off else None
            for off, on in zip(*(result["final_return"] for result in summaries), strict=True)
        ],
        "versions": accelerator_check.versions(),
        "commit": accelerator_check.commit(),
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

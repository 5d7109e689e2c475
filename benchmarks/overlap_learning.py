"""Acting overlapped with learning: a preset trained with overlap off and on, in turns.

Each repeat trains the preset for `--phases` phases twice, off then on, each in a fresh
process on every CPU this one may use (`core_scaling.measure`), and keeps the env
steps/s of its phases but the first and the last (`steady`). The machines are shared and
noisy, so the two settings take turns and the line gives each repeat's ratio on / off
beside their median and spread. Prints one JSON line.

    python benchmarks/overlap_learning.py            # cheetah_clipped on the MuJoCo batch
    python benchmarks/overlap_learning.py --preset humanoid --repeats 5 --phases 4
    python benchmarks/overlap_learning.py --preset humanoid_clipped --set device=gpu
    python benchmarks/overlap_learning.py --quick    # checks that it runs

`--set key=value` adds a setting to every run, after the preset's defaults of
core_scaling (`backend=mujoco` for cheetah_clipped and humanoid_clipped).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

import accelerator_check
import core_scaling


def steady(run: dict) -> int:
    """Env steps/s of a run's phases but its first (which compiles) and its last.

    With overlap, the last phase also trains the update it would leave pending, which a
    long run does once in all its phases.
    """
    middle = run["train_env_steps_per_sec_by_phase"][1:-1]
    return round(sum(middle) / len(middle))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cheetah_clipped")
    parser.add_argument("--repeats", type=int, default=5, help="turns of off and on")
    parser.add_argument("--phases", type=int, help="train phases per run (default 6)")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="tiny runs, to check it works")
    parser.add_argument("--timeout", type=float, help="seconds each process may take")
    args = parser.parse_args()
    if args.phases is None:
        args.phases = 3 if args.quick else 6
    if args.phases < 3:
        parser.error(
            f"--phases must be at least 3 (the first and last are left out), got {args.phases}"
        )
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    for text in args.set:
        if "=" not in text:
            parser.error(f"--set takes key=value, got {text!r}")
    args.env_seconds = 0.0  # `measure` passes it on; only its env part reads it.
    settings = dict(core_scaling.DEFAULTS.get(args.preset, {}))
    if args.quick:
        quick = accelerator_check.QUICK.get(args.preset, {"num_envs": 4})
        settings.update({"eval_episodes": 1, "final_episodes": 1, **quick})
    settings.update(dict(text.partition("=")[::2] for text in args.set))
    cpus = sorted(os.sched_getaffinity(0))
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for setting in ("off", "on"):
            line = core_scaling.measure(args, "train", cpus, {**settings, "overlap": setting})
            runs[setting].append(line["measured"])
            versions = line["versions"]
    rate = {name: [steady(run) for run in runs[name]] for name in runs}
    ratios = [on / off for off, on in zip(rate["off"], rate["on"], strict=True)]
    line = {
        "benchmark": "overlap_learning",
        "preset": args.preset,
        "settings": settings,
        "cores": len(cpus),
        "phases": args.phases,
        "phase_steps": runs["on"][0]["phase_steps"],
        "off_env_steps_per_sec": rate["off"],
        "on_env_steps_per_sec": rate["on"],
        "off_train_seconds": [run["train_seconds"] for run in runs["off"]],
        "on_train_seconds": [run["train_seconds"] for run in runs["on"]],
        "on_over_off": [round(ratio, 3) for ratio in ratios],
        "on_over_off_median": round(statistics.median(ratios), 3),
        "on_over_off_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "off_final_return": [run["final_return"] for run in runs["off"]],
        "on_final_return": [run["final_return"] for run in runs["on"]],
        **versions,
        "date": datetime.date.today().isoformat(),
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

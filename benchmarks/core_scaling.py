"""How training speed grows with CPU cores: a preset trained pinned to 1, 2, 4, ... cores.

On a CPU the env workers (MuJoCo's threads, worker processes, ale-py's threads) and the
learner (XLA's threads) compete for the same cores. This shows whether more cores buy
speed, and how much of it training keeps: for each core count it measures

- train: the preset trained for `--phases` phases (`steps` = phases x a phase's env
  steps), as the train command trains it in memory; env steps/s of every phase, and
  their mean over the phases after the first (the first compiles); and the steady rate,
  the env steps over the train seconds of the phases between the first and the last,
  which train as many updates as they act for, overlapped or not (an overlapped run's
  first phase trains one update fewer, its last one more: the update it settles);
- env only: the same env, built as training builds it (`environments.build`, its
  `BatchEnv`), stepped through Gymnasium's vector API with random actions sampled
  beforehand for `--env-seconds`; env steps/s. None for JAX-native presets, whose envs
  run inside the learner's program;

and prints one JSON line: their ratio train / env only (the share of the env's speed
that training keeps), and each one's speedup over the smallest core count of the run.
Each measurement is a fresh process that pins itself to the first n CPUs of this
process's affinity (`os.sched_setaffinity`) before JAX or any env starts, so XLA's
thread pools and the env's threads (`split.cores`) size themselves for n cores.

    python benchmarks/core_scaling.py                         # cheetah_clipped, MuJoCo batch
    python benchmarks/core_scaling.py --cores 1 2 4 8 --phases 8
    python benchmarks/core_scaling.py --preset humanoid_clipped --set num_envs=32
    python benchmarks/core_scaling.py --set backend=processes  # worker processes instead
    python benchmarks/core_scaling.py --quick --cores 1       # checks that it runs

`--set key=value` adds a setting to every run, after the preset's defaults here
(`backend=mujoco` for cheetah_clipped and humanoid_clipped). `--quick` trains 2 tiny
phases (accelerator_check's QUICK sizes) and steps the env for 0.5 s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import accelerator_check

if TYPE_CHECKING:
    from batchrl.configs.train_config import TrainConfig

# Settings every run of a preset takes unless `--set` says otherwise.
DEFAULTS = {
    "cheetah_clipped": {"backend": "mujoco"},
    "humanoid_clipped": {"backend": "mujoco"},
}
QUICK_PHASES = 2
QUICK_ENV_SECONDS = 0.5
# Random action batches sampled before the env-only timing, stepped in turn.
ACTION_BATCHES = 64
WARMUP_STEPS = 10


def default_cores(available: int) -> list[int]:
    """Powers of two below `available`, then `available` itself: 1, 2, 4, 6 for 6."""
    counts = [1 << k for k in range(available.bit_length()) if 1 << k < available]
    return [*counts, available]


def build_config(preset: str, settings: dict, phases: int) -> TrainConfig:
    """The preset with `settings` applied in their order, trained for `phases` phases."""
    from batchrl.configs import overrides, presets, train_config

    config = presets.get(preset)
    for key, value in settings.items():
        config = overrides.parse_override(config, f"{key}={value}")
    phase_steps = config.batch_steps_per_phase * config.num_envs
    return train_config.replace(config, steps=phases * phase_steps)


def train_child(preset: str, config: TrainConfig) -> dict:
    """Trains `config` in memory: env steps/s and final return, and the versions run."""
    from batchrl.training import api

    api.start(config, preset, None)  # As the train command: XLA's threads, the env.
    from batchrl.training import run as run_lib  # Starts JAX: after `start`.

    rows = run_lib.train(None, config).metrics
    rates = [row["perf/env_steps_per_sec"] for row in rows]
    phase_steps = config.batch_steps_per_phase * config.num_envs
    steady = rows[1:-1] or rows[1:]  # Of two phases, the second, though it is the last.
    steady_seconds = sum(row["perf/train_seconds"] for row in steady)
    measured = {
        "steps": int(rows[-1]["perf/env_steps"]),
        "phase_steps": phase_steps,
        "train_env_steps_per_sec": round(sum(rates[1:]) / len(rates[1:])),
        "train_env_steps_per_sec_by_phase": [round(rate) for rate in rates],
        "train_env_steps_per_sec_steady": round(phase_steps * len(steady) / steady_seconds),
        "train_seconds": round(sum(row["perf/train_seconds"] for row in rows), 2),
        "final_return": round(rows[-1]["final/return"], 2),
    }
    versions = {**accelerator_check.versions(), "commit": accelerator_check.commit()}
    return {"measured": measured, "versions": versions}


def env_child(preset: str, config: TrainConfig, seconds: float) -> dict:
    """Steps `config`'s batch of envs with random actions for `seconds`: env steps/s."""
    from batchrl.training import api

    api.start(config, preset, None)  # The same XLA threads as training's process.
    if config.jax_native:  # The envs run inside the learner's program: none to step alone.
        none = {"env_seconds": None, "env_only_env_steps_per_sec": None, "env_threads": None}
        return {"measured": none}
    from batchrl.training import environments  # Starts JAX: after `start`.

    _, batch_env = environments.build(config)
    # Training reads no infos: neither does this loop, so none is fetched from a worker.
    batch_env.lazy_infos = True
    with batch_env:
        batch_env.action_space.seed(config.seed)
        actions = [batch_env.action_space.sample() for _ in range(ACTION_BATCHES)]
        batch_env.reset(seed=config.seed)
        for step in range(WARMUP_STEPS):
            batch_env.step(actions[step % ACTION_BATCHES])
        steps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            batch_env.step(actions[steps % ACTION_BATCHES])
            steps += 1
        threads = [getattr(group, "threads", None) for group in batch_env.groups]
    measured = {
        "env_seconds": round(elapsed, 2),
        "env_only_env_steps_per_sec": round(steps * config.num_envs / elapsed),
        # MuJoCo's or ale-py's threads; None for worker processes (`split` sizes those).
        "env_threads": None if None in threads else sum(threads),
    }
    return {"measured": measured}


def measure(args: argparse.Namespace, part: str, cpus: list[int], settings: dict) -> dict:
    """Runs one part (`train` or `env`) in a fresh process pinned to `cpus`; its results.

    Raises RuntimeError with the child's last line of stderr when it fails.
    """
    command = [sys.executable, __file__, "--child", part, "--cpus", json.dumps(cpus)]
    command += ["--preset", args.preset, "--settings", json.dumps(settings)]
    command += ["--phases", str(args.phases), "--env-seconds", str(args.env_seconds)]
    from batchrl.scripts import exiting

    root = str(accelerator_check.ROOT)
    # This checkout's batchrl, whose commit the line names, before any installed one.
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    environ = exiting.with_parent({**os.environ, "PYTHONPATH": path})
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=root, env=environ, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{part}: stopped after its --timeout of {args.timeout:g} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = done.stderr.strip().splitlines() or ["no output"]
        print("\n".join(tail[-30:]), file=sys.stderr)  # The traceback, to diagnose.
        raise RuntimeError(f"{part}: {tail[-1]}")
    return json.loads(lines[-1])


def ratio(over: float | None, under: float | None) -> float | None:
    """The quotient over / under to 3 places; None when either is missing."""
    return None if over is None or not under else round(over / under, 3)


def child(args: argparse.Namespace) -> None:
    """One part in this process, pinned first; prints its JSON line."""
    os.sched_setaffinity(0, set(json.loads(args.cpus)))  # Before JAX or any env thread.
    config = build_config(args.preset, json.loads(args.settings), args.phases)
    if args.child == "train":
        line = train_child(args.preset, config)
    else:
        line = env_child(args.preset, config, args.env_seconds)
    print(json.dumps(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cheetah_clipped")
    parser.add_argument("--cores", nargs="+", type=int, help="core counts; default 1, 2, 4, ...")
    parser.add_argument("--phases", type=int, help="train phases per run (default 6)")
    parser.add_argument("--env-seconds", type=float, help="env-only seconds (default 5)")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="tiny runs, to check it works")
    parser.add_argument("--timeout", type=float, help="seconds each process may take")
    parser.add_argument("--child", choices=("train", "env"), help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases is None:
        args.phases = QUICK_PHASES if args.quick else 6
    if args.env_seconds is None:
        args.env_seconds = QUICK_ENV_SECONDS if args.quick else 5.0
    from batchrl.scripts import exiting

    if args.child:
        exiting.terminate_with_parent()  # Ends with this script, killed or timed out.
        child(args)
        return 0
    exiting.sigterm_exits()
    if args.phases < 2:
        parser.error(f"--phases must be at least 2 (the first compiles), got {args.phases}")
    for text in args.set:
        if "=" not in text:
            parser.error(f"--set takes key=value, got {text!r}")
    allowed = sorted(os.sched_getaffinity(0))
    counts = sorted(set(args.cores or default_cores(len(allowed))))
    if counts[0] < 1 or counts[-1] > len(allowed):
        parser.error(f"--cores must be from 1 to {len(allowed)} (this process's CPUs)")
    settings = dict(DEFAULTS.get(args.preset, {}))
    if args.quick:
        quick = accelerator_check.QUICK.get(args.preset, {})
        settings = {"eval_episodes": 1, "final_episodes": 1, **settings, **quick}
    settings.update(text.partition("=")[::2] for text in args.set)
    try:  # Here, in one line: each core count's child printed its traceback.
        build_config(args.preset, settings, args.phases)
    except ValueError as error:
        parser.error(str(error))
    if args.env_seconds <= 0:
        parser.error(f"--env-seconds must be positive, got {args.env_seconds}")
    first: dict | None = None
    failed = False
    for count in counts:
        cpus = allowed[:count]
        line = {"benchmark": "core_scaling", "preset": args.preset, "settings": settings}
        line |= {"cores": count, "cpus": cpus, "phases": args.phases}
        try:
            env = measure(args, "env", cpus, settings)
            train = measure(args, "train", cpus, settings)
        except RuntimeError as error:
            failed = True
            print(json.dumps({**line, "error": str(error)}), flush=True)
            continue
        line |= train["measured"] | env["measured"]
        train_rate = line["train_env_steps_per_sec"]
        env_rate = line["env_only_env_steps_per_sec"]
        first = first or line  # The smallest core count measured.
        line["train_over_env"] = ratio(train_rate, env_rate)
        line["train_speedup"] = ratio(train_rate, first["train_env_steps_per_sec"])
        line["train_steady_speedup"] = ratio(
            line["train_env_steps_per_sec_steady"], first["train_env_steps_per_sec_steady"]
        )
        line["env_only_speedup"] = ratio(env_rate, first["env_only_env_steps_per_sec"])
        line |= train["versions"] | {"date": datetime.date.today().isoformat()}
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""One accelerator check: every env kind trains with its learner on the accelerator.

Prints one JSON line per run: its preset and settings, final return, wall seconds, env
steps/s of every phase, where it acted and learned, the devices JAX has, the JAX,
jaxlib and CUDA versions, the commit. Each run is a fresh process (as the train command
is), so one run's compiled programs and threads never time another's.

    python benchmarks/accelerator_check.py           # one GPU: under 8 minutes
    python benchmarks/accelerator_check.py --quick   # about a minute on a CPU
    python benchmarks/accelerator_check.py --only cheetah_clipped --set device=cpu

The full check: `pendulum_jax` (1M steps) and `breakout_minatar` (10M), JAX-native on
the learner's device; `cheetah_clipped` (1M) and `humanoid_clipped` (410k) on the MuJoCo
batch, acting on the CPU; `breakout` on ale-py's games (400k). `--set key=value` adds
a setting to every run: `--set device=cpu --only cheetah_clipped humanoid_clipped` gives the
same machine's CPU figures for the targets (Atari's CNN and 10M MinAtar steps take far
longer on a CPU).
On a machine with no network, see docs/training.md ("Checking a GPU machine").
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

# name: (preset, full steps, quick steps, settings of every run of it)
CHECKS = {
    "pendulum_jax": ("pendulum_jax", 1_000_000, 6_000, {}),
    "breakout_minatar": ("breakout_minatar", 10_000_000, 8_192, {}),
    "cheetah_clipped": ("cheetah_clipped", 1_000_000, 2_048, {"backend": "mujoco"}),
    # 20 phases, not 1M steps: it trained at 4,081 env steps/s on one H200, so 1M steps
    # (about 250 s) would take the check past its 8 minutes; its speed shows in 20 phases.
    "humanoid_clipped": ("humanoid_clipped", 409_600, 2_048, {"backend": "mujoco"}),
    "breakout": ("breakout", 400_000, 128, {}),
}
# Quick runs: one small phase each, so compiling is most of their time.
QUICK = {
    "breakout_minatar": {"num_envs": 64, "phase_steps": 8_192},
    "cheetah_clipped": {"num_envs": 4, "steps_per_update": 512, "phase_steps": 2_048},
    "humanoid_clipped": {"num_envs": 4, "steps_per_update": 512, "phase_steps": 2_048},
    "breakout": {"num_envs": 4, "steps_per_update": 32, "phase_steps": 128},
}
ROOT = pathlib.Path(__file__).resolve().parent.parent


def versions() -> dict:
    """JAX's versions and devices, and the CUDA its GPU backend runs on (None without one)."""
    import jax
    import jaxlib
    from jax.extend import backend  # Not imported with `jax` itself.

    try:
        cuda = backend.get_backend("gpu").platform_version
    except RuntimeError:  # No GPU backend.
        cuda = None
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "cuda": cuda,
        "devices": [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()],
        "python": platform.python_version(),
    }


def commit() -> str | None:
    """The checkout's commit; None where there is no git or no repository (a copied tree)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def child(name: str, steps: int, settings: dict) -> None:
    """Trains one check in memory and prints its JSON line.

    `settings` are applied as the train command's `--set key=value`, in their order.
    """
    from batchrl.configs import overrides, presets, train_config
    from batchrl.training import api

    preset = CHECKS[name][0]
    config = train_config.replace(presets.get(preset), steps=steps)
    for key, value in settings.items():
        config = overrides.parse_override(config, f"{key}={value}")
    api.start(config, preset, None)  # As the train command: XLA's threads, the env.
    from batchrl.training import run as run_lib  # Starts JAX: after `start`.

    start = time.perf_counter()
    result = run_lib.train(None, config)
    wall = time.perf_counter() - start
    rows = result.metrics
    line = {
        "benchmark": "accelerator_check",
        "check": name,
        "preset": preset,
        "settings": settings,
        "steps": int(rows[-1]["perf/env_steps"]),
        "final_return": round(rows[-1]["final/return"], 2),
        "wall_seconds": round(wall, 1),
        "train_seconds": round(sum(row["perf/train_seconds"] for row in rows), 1),
        "eval_seconds": round(sum(row["perf/eval_seconds"] for row in rows), 1),
        "env_steps_per_sec": [round(row["perf/env_steps_per_sec"]) for row in rows],
        "placement": result.programs.where.describe(),
        **versions(),
        "commit": commit(),
    }
    print(json.dumps(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs: about a minute on a CPU")
    parser.add_argument("--only", nargs="*", choices=list(CHECKS), default=list(CHECKS))
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--timeout", type=float, help="seconds each run may take before it is stopped"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from batchrl.scripts import exiting

    if args.child:
        exiting.terminate_with_parent()  # Ends with this script, killed or timed out.
        child(args.child, args.steps, json.loads(args.settings))
        return 0
    exiting.sigterm_exits()
    extra = dict(text.partition("=")[::2] for text in args.set)
    for text in args.set:
        if "=" not in text:
            parser.error(f"--set takes key=value, got {text!r}")
    from batchrl.configs import overrides, presets

    for name in args.only:  # Here, in one line: each check's child printed its traceback.
        for key, value in extra.items():
            try:
                overrides.parse_override(presets.get(CHECKS[name][0]), f"{key}={value}")
            except ValueError as error:
                parser.error(f"{name}: {error}")
    failed, devices = [], []
    for name in args.only:
        _, full, quick, settings = CHECKS[name]
        settings = {**settings, **(QUICK.get(name, {}) if args.quick else {}), **extra}
        if args.quick:
            settings = {"eval_episodes": 1, "final_episodes": 1, **settings}
        command = [sys.executable, __file__, "--child", name]
        command += ["--steps", str(quick if args.quick else full)]
        command += ["--settings", json.dumps(settings)]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=exiting.with_parent(),
                timeout=args.timeout,
            )
        except subprocess.TimeoutExpired:
            failed.append(name)
            error = f"stopped after its --timeout of {args.timeout:g} s"
            print(json.dumps({"benchmark": "accelerator_check", "check": name, "error": error}))
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            failed.append(name)
            tail = done.stderr.strip().splitlines() or ["no output"]
            print("\n".join(tail[-30:]), file=sys.stderr)  # The traceback, to diagnose.
            print(json.dumps({"benchmark": "accelerator_check", "check": name, "error": tail[-1]}))
            continue
        line = json.loads(lines[-1])
        line["process_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(line), flush=True)
        devices += line["devices"]
    if devices and all(device.startswith("cpu") for device in devices):  # Not a GPU's pass.
        print(
            "no accelerator: JAX found only its CPU, where every check above ran (on a GPU, "
            "install JAX's CUDA build: pip install -e '.[cuda]')",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Training speed with Ray: rollout actors against per-step Ray actors and local workers.

Prints one JSON line a preset. Starts a local two-node Ray cluster on this machine
(`ray.cluster_utils.Cluster`, one CPU a node) and trains the preset for `--phases`
phases three ways, in alternating rounds, each in a fresh process: its envs in local
worker processes (`backend=processes`), on the cluster's actors stepped once a batch
step (`backend=ray`, one actor a node), and in two rollout actors, one a node, that act
a segment at a time (`rollout_actors=2`), their envs in worker processes or stepped in
the actors' own processes (`local_envs=16`), acting one version behind the learner or
not (`overlap=on`), the learner on every core or kept to one (`learner_cores=1`; the
cluster's actors share this machine's cores with it). Each run's speed is its env
steps over its train seconds after the first phase (which compiles); the median over
rounds is kept, with every round's figures and each Ray variant's ratio to local workers.

The steady speed leaves out the last phase too: each phase between the first and the
last acts one segment and trains one update, overlapped or not, where an overlapped
run's first phase trains none and its last trains two (the update it settles at the
end). A long run's speed is its steady one; a run of few phases pays the ends once.

    python benchmarks/ray_training.py [--preset cartpole cheetah_clipped] [--rounds 3]
        [--variant local_workers rollout_actors_overlap ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

import accelerator_check
import flags

from batchrl.scripts import exiting

try:
    from ray.cluster_utils import Cluster
except ModuleNotFoundError:
    raise SystemExit(
        "ray_training.py runs on Ray, which is not installed: pip install -e '.[ray]'"
    ) from None

# preset: its settings, the clipped objective (rollout actors need it) at every speed.
PRESETS = {
    "cartpole": ["objective=clipped", "num_envs=32", "steps_per_update=64"],
    "cheetah_clipped": ["num_envs=32", "steps_per_update=64"],
    "breakout": ["num_envs=32", "steps_per_update=64"],  # The ale variants only.
}
PHASE = 32 * 64  # Env steps a phase: one update of 64 steps on 32 envs.
VARIANTS = {
    "local_workers": ["backend=processes"],
    "ray_per_step": ["backend=ray"],
    "rollout_actors": ["backend=processes", "rollout_actors=2", "overlap=off"],
    # Each actor steps its 16 envs in its own process: no worker between it and them.
    "rollout_actors_in_process": [
        "backend=processes",
        "rollout_actors=2",
        "local_envs=16",
        "overlap=off",
    ],
    # The MuJoCo batch (cheetah_clipped): here, and one batch in each actor.
    "local_mujoco": ["backend=mujoco"],
    "rollout_actors_mujoco": ["backend=mujoco", "rollout_actors=2", "overlap=off"],
    "rollout_actors_mujoco_overlap": ["backend=mujoco", "rollout_actors=2", "overlap=on"],
    # ale-py's games (breakout): here, and in each actor with its evaluation games.
    "local_ale": ["backend=ale"],
    "rollout_actors_ale": ["backend=ale", "rollout_actors=2", "overlap=off"],
    # The actors act the next segment while the learner trains on the last one.
    "rollout_actors_overlap": ["backend=processes", "rollout_actors=2", "overlap=on"],
    "rollout_actors_in_process_overlap": [
        "backend=processes",
        "rollout_actors=2",
        "local_envs=16",
        "overlap=on",
    ],
}
# The overlapped ones with the learner kept to one core (`learner_cores=1`): on a cluster
# on this machine, its update and the actors' acting share the cores.
PINNED = {
    f"{variant}_learner_cores_1": [*VARIANTS[variant], "learner_cores=1"]
    for variant in ("rollout_actors_overlap", "rollout_actors_mujoco_overlap")
}
VARIANTS.update(PINNED)


def fits(preset: str, variant: str) -> bool:
    """Whether `variant`'s backend runs `preset`'s env: MuJoCo's for cheetah, ALE's for breakout."""
    backend = next(s.split("=")[1] for s in VARIANTS[variant] if s.startswith("backend="))
    if preset == "breakout":
        return backend == "ale"
    return backend != "ale" and (backend != "mujoco" or preset == "cheetah_clipped")


def train(preset: str, variant: str, phases: int, address: str) -> dict:
    """Trains one variant in its own process; its env steps/s after the first phase."""
    settings = [*PRESETS[preset], *VARIANTS[variant], "normalizer_updates=segment"]
    settings += [f"phase_steps={PHASE}", f"steps={PHASE * phases}", "eval_every=1000"]
    settings += ["final_episodes=1", "eval_episodes=1"]
    with tempfile.TemporaryDirectory() as logdir:
        command = [sys.executable, "-m", "batchrl.scripts.train", "--config", preset]
        command += ["--logdir", logdir, "--timestamp", "t"]
        for setting in settings:
            command += ["--set", setting]
        env = exiting.with_parent({**os.environ, "RAY_ADDRESS": address})
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
        if done.returncode:
            raise RuntimeError(f"{variant} on {preset} failed:\n{done.stderr[-3000:]}")
        (folder,) = pathlib.Path(logdir).iterdir()
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    later = rows[1:]
    steady = rows[1:-1] or later  # Of two phases, the second, though it is the last.
    seconds = sum(row["perf/train_seconds"] for row in later)
    steady_seconds = sum(row["perf/train_seconds"] for row in steady)
    return {
        "env_steps_per_sec": PHASE * len(later) / seconds,
        "steady_env_steps_per_sec": PHASE * len(steady) / steady_seconds,
        "phases": len(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="*", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--rounds", type=flags.positive_int, default=3)
    parser.add_argument("--variant", nargs="*", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    if args.phases < 2:
        parser.error(f"--phases must be at least 2 (the first compiles), got {args.phases}")
    if set(args.variant) & set(PINNED) and not hasattr(os, "sched_setaffinity"):
        parser.error(f"--variant {' '.join(PINNED)} needs os.sched_setaffinity (Linux)")
    exiting.sigterm_exits()  # The cluster shut down below, not left running.
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        for preset in args.preset:
            variants = [variant for variant in args.variant if fits(preset, variant)]
            if not variants:
                print(f"ray_training: no --variant given runs {preset}", file=sys.stderr)
                continue
            speeds: dict[str, list[float]] = {variant: [] for variant in variants}
            steady: dict[str, list[float]] = {variant: [] for variant in variants}
            for _ in range(args.rounds):
                for variant in variants:
                    result = train(preset, variant, args.phases, cluster.address)
                    speeds[variant].append(round(result["env_steps_per_sec"]))
                    steady[variant].append(round(result["steady_env_steps_per_sec"]))
            median = {variant: statistics.median(values) for variant, values in speeds.items()}
            steady_median = {variant: statistics.median(v) for variant, v in steady.items()}
            local = median.get("local_workers")
            line = {
                "benchmark": "ray_training",
                "preset": preset,
                "settings": PRESETS[preset],
                "num_envs": 32,
                "phases": args.phases,
                "nodes": 2,
                "cores": os.cpu_count(),
                "env_steps_per_sec": median,
                "rounds": speeds,
                "ratio_to_local": {v: round(s / local, 3) for v, s in median.items()}
                if local
                else None,
                "steady_env_steps_per_sec": steady_median,
                "steady_rounds": steady,
                "python": platform.python_version(),
                "commit": accelerator_check.commit(),  # The docs' table picks rows by it.
                "date": datetime.date.today().isoformat(),
            }
            if local:  # The steady ratios to local workers: of the medians, and each round's.
                steady_local = steady_median["local_workers"]
                line["steady_ratio_to_local"] = {
                    variant: round(speed / steady_local, 3)
                    for variant, speed in steady_median.items()
                }
                line["steady_ratio_to_local_by_round"] = {
                    variant: [
                        round(a / b, 3)
                        for a, b in zip(steady[variant], steady["local_workers"], strict=True)
                    ]
                    for variant in steady
                    if variant != "local_workers"
                }
            for kind in ("mujoco", "ale"):  # Each round's ratio of actors to one batch here.
                here, actors = f"local_{kind}", f"rollout_actors_{kind}"
                if {here, actors} <= set(speeds):
                    pairs = zip(speeds[actors], speeds[here], strict=True)
                    line[f"{kind}_actors_over_local_{kind}"] = [round(a / b, 3) for a, b in pairs]
                for variant in (actors, f"{actors}_overlap"):  # Steady, each round.
                    if {here, variant} <= set(steady):
                        pairs = zip(steady[variant], steady[here], strict=True)
                        ratios = [round(a / b, 3) for a, b in pairs]
                        line[f"steady_{variant}_over_local_{kind}_by_round"] = ratios
            print(json.dumps(line), flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()

"""The MinAtar presets' training speed on this machine, beside gymnax-blines' published CPU speeds.

Prints one JSON line. For each preset the train command's env and programs are built
(`loop.build`, fully compiled on gymnax) and train phases run with `loop.run_phase`: the
first compiles and is reported apart, then `--phases` timed rounds go over the presets in
turn, so a busy moment of the shared machine falls on all of them. Env steps/s are a
phase's env steps over its seconds, acting and updates together, evaluation apart. The
update's share of a phase: one update of the clipped objective, compiled alone and timed
on the agent's rollout storage after the run (mean of `--repeats`), times the updates a
phase made, over the phase's median seconds. The projection of a preset's run (its
`steps`, 10M) is the first phase's seconds, compile included, and the other steps at the
median rate, without the evaluation rounds (`eval_every`), whose length grows with the
agent's episodes.

Beside each, gymnax-blines' published CPU figures (`PUBLISHED`): seconds for 1M env
steps of step transitions alone, no learning, by a random (R) or MLP (N) policy.

    python benchmarks/minatar_speed.py [--presets breakout_minatar ...] [--phases 2]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import flags
import jax

from batchrl.configs import presets
from batchrl.ppo import clipped
from batchrl.scripts import provenance
from batchrl.training import environments, loop

PRESETS = ["breakout_minatar", "space_invaders_minatar", "asterix_minatar", "freeway_minatar"]

# RobertTLange/gymnax-blines, Readme.md at 3f029d6 (2023-04-03; the table is unchanged since
# 53ed854, 2022-06-22), "Speed Up Evaluation": "For each environment we estimate the seconds
# required to execute 1 Mio steps on various hardware and for both random (R)/neural network
# (N) policies. We report the mean over 10 independent runs". Columns `jax` CPU 10 Envs and
# `jax` CPU 40 Envs; the CPU's model is not named. N is an MLP of 2 x 256 units (speed.py
# reads agents/<env>/es.yaml). No PPO training time is published.
SOURCE = "github.com/RobertTLange/gymnax-blines Readme.md (3f029d6), jax CPU columns"
PUBLISHED = {
    "Breakout-MinAtar": {"10_envs": {"R": 2.41, "N": 13.70}, "40_envs": {"R": 2.33, "N": 13.93}},
    "SpaceInvaders-MinAtar": {
        "10_envs": {"R": 12.73, "N": 33.51},
        "40_envs": {"R": 14.37, "N": 30.09},
    },
    "Asterix-MinAtar": {"10_envs": {"R": 5.49, "N": 20.15}, "40_envs": {"R": 5.86, "N": 22.46}},
    "Freeway-MinAtar": {"10_envs": {"R": 26.35, "N": 74.02}, "40_envs": {"R": 26.25, "N": 53.66}},
}


def compiled_update(programs: loop.Programs, state: loop.RunState):
    """One clipped update compiled alone, and its arguments: the agent's rollout storage."""
    networks, total = programs.networks, state.agent.total_updates
    args = (state.agent.learner, state.agent.storage.rollout)
    update = jax.jit(lambda *args: clipped.update(networks, *args, total))
    compiled = update.lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    return compiled, args


def update_seconds(runs: dict, repeats: int) -> dict[str, float]:
    """Each preset's seconds of one update, the mean of `repeats` taken in alternating rounds."""
    updates = {name: compiled_update(run["programs"], run["state"]) for name, run in runs.items()}
    seconds = {name: 0.0 for name in runs}
    for _ in range(repeats):
        for name, (compiled, args) in updates.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            seconds[name] += (time.perf_counter() - start) / repeats
    return seconds


def summary(name: str, run: dict, update: float) -> dict:
    config = run["config"]
    seconds = statistics.median(run["seconds"])
    steps = config.batch_steps_per_phase * config.num_envs
    rate = steps / seconds
    updates = run["updates"][-1]
    projected = run["first"] + (config.steps - steps) / rate  # The first phase as it went.
    published = PUBLISHED[config.env]
    return {
        "preset": name,
        "env": config.env,
        "num_envs": config.num_envs,
        "env_steps_per_phase": steps,
        "first_phase_seconds_with_compile": round(run["first"], 2),
        "phase_seconds": [round(s, 2) for s in run["seconds"]],
        "env_steps_per_sec": [round(steps / s) for s in run["seconds"]],
        "env_steps_per_sec_median": round(rate),
        "updates_per_phase": updates,
        "update_seconds_each": round(update, 3),
        "update_share": round(update * updates / seconds, 3),
        # None where no episode ended in the phase (Freeway's last 2,500 steps).
        "mean_episode_length": [
            round(length, 1) if math.isfinite(length) else None for length in run["lengths"]
        ],
        "budget_steps": config.steps,
        "projected_train_hours": round(projected / 3600, 2),
        "gymnax_blines_cpu_seconds_per_1m_steps": published,
        "gymnax_blines_cpu_env_steps_per_sec_40_envs_mlp": round(1e6 / published["40_envs"]["N"]),
    }


def measure(names: list[str], phases: int, repeats: int) -> list[dict]:
    runs = {}
    for name in names:  # Each first phase compiles; the timed rounds come after all.
        config = presets.get(name)
        env, _ = environments.build(config)
        programs, state = loop.build(config, env, eval_steps=1)
        state, metrics = loop.run_phase(programs, state)
        runs[name] = {
            "config": config,
            "programs": programs,
            "state": state,
            "first": metrics["perf/train_seconds"],
            "seconds": [],
            "updates": [],
            "lengths": [],
        }
    for _ in range(phases):
        for run in runs.values():
            before = int(run["state"].agent.learner.updates)
            run["state"], metrics = loop.run_phase(run["programs"], run["state"])
            run["seconds"].append(metrics["perf/train_seconds"])
            run["updates"].append(int(run["state"].agent.learner.updates) - before)
            run["lengths"].append(metrics["train/length"])
    updates = update_seconds(runs, repeats)
    return [summary(name, run, updates[name]) for name, run in runs.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", choices=PRESETS, default=PRESETS)
    parser.add_argument(
        "--phases", type=flags.positive_int, default=2, help="timed phases after the first"
    )
    parser.add_argument(
        "--repeats", type=flags.positive_int, default=3, help="timed updates a preset"
    )
    args = parser.parse_args()
    results = measure(args.presets, args.phases, args.repeats)
    line = {
        "benchmark": "minatar_speed",
        "machine": provenance.machine(),
        "gymnax_blines_source": SOURCE,
        "results": results,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

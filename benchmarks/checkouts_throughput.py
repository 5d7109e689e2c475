"""Env-steps/s of `BatchEnv.external` in this checkout and another one, in one run.

Prints one JSON line. Each checkout's batch lives in a child process of its own (its
code first on `sys.path`); the two are measured in alternating rounds, beside Gymnasium's
`AsyncVectorEnv` in a third, so a change's effect on the workers' throughput is read off
the same noisy machine at the same time. Actions are drawn uniformly at random.

    git worktree add /tmp/before <commit>
    python benchmarks/checkouts_throughput.py --before /tmp/before [--env HalfCheetah-v5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import statistics
import subprocess
import sys

import gymnasium as gym

HERE = pathlib.Path(__file__).resolve().parents[1]

CHILD = """
import sys, time, numpy as np
sys.path.insert(0, {root!r})
import gymnasium as gym
from batchrl.envs import BatchEnv

def main():
    kind, env_id, num_envs = {kind!r}, {env_id!r}, {num_envs}
    if kind == "async":
        env = gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * num_envs)
    else:
        env = BatchEnv.external(env_id, num_envs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    space = env.single_action_space
    actions = rng.uniform(space.low, space.high, (256, num_envs, *space.shape))
    actions = actions.astype(space.dtype)
    for action in actions[:20]:
        env.step(action)
    print("ready", flush=True)
    for line in sys.stdin:
        seconds, steps, start = float(line), 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for action in actions:
                env.step(action)
            steps += len(actions) * num_envs
        print(steps / (time.perf_counter() - start), flush=True)
    env.close()

if __name__ == "__main__":
    main()
"""


class Child:
    """One batch in its own interpreter, measured on request."""

    def __init__(self, root: pathlib.Path, kind: str, env_id: str, num_envs: int):
        source = CHILD.format(root=str(root), kind=kind, env_id=env_id, num_envs=num_envs)
        self.process = subprocess.Popen(
            [sys.executable, "-c", source],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} batch of {root} did not start")

    def rate(self, seconds: float) -> float:
        self.process.stdin.write(f"{seconds}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=pathlib.Path, required=True, help="the other checkout")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    gym.make(args.env).close()  # Names a missing env before any child starts.
    roots = {"before": args.before.resolve(), "after": HERE}
    children = {name: Child(root, "batch", args.env, args.num_envs) for name, root in roots.items()}
    children["async_vector_env"] = Child(HERE, "async", args.env, args.num_envs)
    samples: dict[str, list[float]] = {name: [] for name in children}
    try:
        for _ in range(args.rounds):
            for name, child in children.items():
                samples[name].append(child.rate(args.seconds))
    finally:
        for child in children.values():
            child.close()
    ratios = [a / b for a, b in zip(samples["after"], samples["before"], strict=True)]
    print(
        json.dumps(
            {
                "benchmark": "checkouts_throughput",
                "env": args.env,
                "num_envs": args.num_envs,
                "cores": multiprocessing.cpu_count(),
                "steps_per_sec": {n: [round(v) for v in vs] for n, vs in samples.items()},
                "median": {n: round(statistics.median(vs)) for n, vs in samples.items()},
                "after_over_before": [round(r, 3) for r in ratios],
                "after_over_before_median": round(statistics.median(ratios), 3),
            }
        )
    )


if __name__ == "__main__":
    main()

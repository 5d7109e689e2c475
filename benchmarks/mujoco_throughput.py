"""Env-steps/s of BatchEnv.mujoco beside EnvPool, worker envs and MuJoCo's physics alone.

Prints one JSON line. For each task, every peer steps the same number of envs with
pre-generated random actions, in rounds that alternate the peers (the machines are
shared and noisy); each round's rates and the ratios within it are reported, with
their medians. The peers:

- `mujoco_batch`: `BatchEnv.mujoco`, Gymnasium's step (observations, rewards, infos,
  autoreset) on a `mujoco.batch.Batch`.
- `physics_alone`: the same `mujoco.batch.Batch` stepping the simulations with no
  observations, rewards or resets: the ceiling of any env on this machine.
- `envpool_sync` and `envpool_async` (half the batch per `recv`): EnvPool's C++ tasks,
  one thread per core.
- `batch_env_external`: `BatchEnv.external(..., local_envs="auto")`, Gymnasium's envs in
  worker processes, the fastest worker setting on 2 cores.

    python benchmarks/mujoco_throughput.py [--rounds 5] [--seconds 2] [--envs HalfCheetah-v5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np

from batchrl.envs import BatchEnv
from batchrl.scripts import provenance

TASKS = ("HalfCheetah-v5", "Hopper-v5", "Ant-v5", "Humanoid-v5")


def actions_for(space: gym.Space, batch: int, count: int = 256) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.uniform(space.low, space.high, (count, batch, *space.shape)).astype(space.dtype)


def timed(step: Callable[[np.ndarray], None], actions: np.ndarray, seconds: float) -> float:
    """Env-steps/s of `step` called on each batch of `actions` in turn for about `seconds`."""
    for action in actions[:10]:
        step(action)
    per_call = actions.shape[1]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for action in actions:
            step(action)
        steps += len(actions) * per_call
    return steps / (time.perf_counter() - start)


class Physics:
    """The simulations of `BatchEnv.mujoco` stepped bare: controls in, `frame_skip` substeps."""

    def __init__(self, env_id: str, num_envs: int):
        env = gym.make(env_id).unwrapped
        self.frame_skip = env.frame_skip
        self.batch = mujoco.batch.Batch(env.model, num_envs, nthread=0)
        self.ctrl = self.batch.bind("ctrl")
        self.batch.reset()

    def step(self, action: np.ndarray) -> None:
        self.ctrl[:] = action
        self.batch.step(nstep=self.frame_skip)


class EnvPoolAsync:
    """EnvPool's async mode: each call receives half the batch's results and sends its actions."""

    def __init__(self, env_id: str, num_envs: int, cores: int):
        import envpool  # From the bench extra.

        self.env = envpool.make_gymnasium(
            env_id, num_envs=num_envs, batch_size=num_envs // 2, num_threads=cores, seed=0
        )
        self.env.async_reset()

    def step(self, action: np.ndarray) -> None:
        *_, info = self.env.recv()
        self.env.send(action, info["env_id"])


def peers(env_id: str, num_envs: int, cores: int) -> dict[str, tuple[Callable, int]]:
    """Each peer's step function and how many envs one call steps."""
    import envpool

    sync = envpool.make_gymnasium(
        env_id, num_envs=num_envs, batch_size=num_envs, num_threads=cores, seed=0
    )
    sync.reset()
    ours = BatchEnv.mujoco(env_id, num_envs)
    ours.reset(seed=0)
    workers = BatchEnv.external(env_id, num_envs, local_envs="auto")
    workers.reset(seed=0)
    return {
        "mujoco_batch": (ours.step, num_envs),
        "physics_alone": (Physics(env_id, num_envs).step, num_envs),
        "envpool_sync": (sync.step, num_envs),
        "envpool_async": (EnvPoolAsync(env_id, num_envs, cores).step, num_envs // 2),
        "batch_env_external": (workers.step, num_envs),
    }, [ours, workers, sync]


def measure(env_id: str, num_envs: int, cores: int, seconds: float, rounds: int) -> dict:
    steppers, closers = peers(env_id, num_envs, cores)
    space = gym.make(env_id).action_space
    actions = {size: actions_for(space, size) for size in {n for _, n in steppers.values()}}
    samples: dict[str, list[float]] = {name: [] for name in steppers}
    try:
        for _ in range(rounds):
            for name, (step, size) in steppers.items():
                samples[name].append(round(timed(step, actions[size], seconds)))
    finally:
        for env in closers:
            env.close()
    ours = samples["mujoco_batch"]
    ratios = {
        f"mujoco_batch_over_{peer}": [
            round(a / b, 3) for a, b in zip(ours, samples[peer], strict=True)
        ]
        for peer in samples
        if peer != "mujoco_batch"
    }
    return {
        "env": env_id,
        "num_envs": num_envs,
        "steps_per_sec": samples,
        "median_steps_per_sec": {name: statistics.median(v) for name, v in samples.items()},
        "ratios_per_round": ratios,
        "median_ratios": {name: statistics.median(v) for name, v in ratios.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="alternating repeats")
    parser.add_argument("--envs", nargs="*", default=TASKS)
    parser.add_argument("--num-envs", type=int, default=32)
    args = parser.parse_args()
    if importlib.util.find_spec("envpool") is None:
        parser.error("the peer, EnvPool, is not installed: pip install -e '.[bench]'")
    warnings.filterwarnings("ignore")
    cores = len(os.sched_getaffinity(0))
    results = [measure(e, args.num_envs, cores, args.seconds, args.rounds) for e in args.envs]
    import envpool

    versions = {"mujoco": mujoco.__version__, "envpool": envpool.__version__}
    record = {
        "benchmark": "mujoco_throughput",
        "cores": cores,
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        **versions,
        "commit": provenance.source_commit(),
        "results": results,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()

"""Env-steps/s of BatchEnv against Gymnasium's vector envs and the machine's limit.

Prints one JSON line. For each task and batch size, the peers run in the same process
one after another, repeated in alternating rounds (the median is kept), because the
machines are shared and noisy. The limit is one env stepped in a plain loop in one
process, times the number of cores. "free_running" splits the same envs over one
process per core that step them in a loop with no one to wait for: what the machine
gives this workload when no batch step has to wait for its slowest part. Actions are
pre-generated uniformly at random.

    python benchmarks/env_throughput.py [--seconds 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import platform
import statistics
import time
import warnings

import gymnasium as gym
import numpy as np

from batchrl.envs import BatchEnv
from batchrl.envs.host.split import default_local_envs

TASKS = ("Pendulum-v1", "HalfCheetah-v5")
SIZES = (8, 32)


def actions_for(space: gym.Space, batch: int, count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, (count, batch, *space.shape)).astype(space.dtype)


def loop_rate(envs: list[gym.Env], actions: np.ndarray, seconds: float) -> float:
    """Env-steps/s of a plain loop stepping `envs` in turn for about `seconds`.

    `actions` is [T, len(envs), ...], repeated; envs that finish are reset.
    """
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for action in actions:
            for env, a in zip(envs, action, strict=True):
                _, _, terminated, truncated, _ = env.step(a)
                if terminated or truncated:
                    env.reset()
        steps += actions.shape[0] * len(envs)
    return steps / (time.perf_counter() - start)


def rate_single(env_id: str, seconds: float) -> float:
    env = gym.make(env_id)
    env.reset(seed=0)
    rate = loop_rate([env], actions_for(env.action_space, 1, 512), seconds)
    env.close()
    return rate


def free_runner(conn: multiprocessing.connection.Connection, env_id: str, count: int) -> None:
    """Steps `count` envs in turn for as long as it is told, then answers its rate."""
    warnings.filterwarnings("ignore")
    envs = [gym.make(env_id) for _ in range(count)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    actions = actions_for(envs[0].action_space, count, 256)
    conn.send("ready")
    while (seconds := _receive(conn)) is not None:
        conn.send(loop_rate(envs, actions, seconds))


def _receive(conn: multiprocessing.connection.Connection) -> float | None:
    """The next instruction; None also when the parent is gone."""
    try:
        return conn.recv()
    except (EOFError, KeyboardInterrupt):
        return None


class FreeRunning:
    """`num_envs` envs split over one process per core, stepped with no synchronisation."""

    def __init__(self, env_id: str, num_envs: int, cores: int):
        context = multiprocessing.get_context("spawn")
        counts = [num_envs // cores + (i < num_envs % cores) for i in range(cores)]
        self.conns, self.processes = [], []
        for count in filter(None, counts):
            parent, child = context.Pipe()
            process = context.Process(target=free_runner, args=(child, env_id, count), daemon=True)
            process.start()
            self.conns.append(parent)
            self.processes.append(process)
        for conn in self.conns:
            conn.recv()

    def rate(self, seconds: float) -> float:
        for conn in self.conns:
            conn.send(seconds)
        return sum(conn.recv() for conn in self.conns)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # A runner that died has nothing to stop.
                conn.send(None)
        for process in self.processes:
            process.join()


def rate_vector(env: gym.vector.VectorEnv, seconds: float) -> float:
    env.reset(seed=0)
    actions = actions_for(env.single_action_space, env.num_envs, 256)
    for action in actions[:20]:
        env.step(action)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for action in actions:
            env.step(action)
        steps += len(actions) * env.num_envs
    return steps / (time.perf_counter() - start)


def measure(env_id: str, num_envs: int, cores: int, seconds: float, rounds: int) -> dict:
    per_worker = sorted({math.ceil(num_envs / cores), math.ceil(num_envs / (2 * cores))})
    makers = {
        "sync_vector_env": lambda: gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs),
        "async_vector_env": lambda: gym.vector.AsyncVectorEnv(
            [lambda: gym.make(env_id)] * num_envs, shared_memory=True
        ),
    }
    for k in per_worker:
        makers[f"batch_env_{k}_per_worker"] = lambda k=k: BatchEnv.external(
            env_id, num_envs, envs_per_worker=k
        )
    default = math.ceil(num_envs / cores)
    makers[f"batch_env_{default}_per_worker_no_spin"] = lambda: BatchEnv.external(
        env_id, num_envs, envs_per_worker=default, spin=0.0
    )

    def lazy() -> BatchEnv:
        env = BatchEnv.external(env_id, num_envs, envs_per_worker=default)
        env.lazy_infos = True  # Infos fetched from the workers only when read: never here.
        return env

    makers[f"batch_env_{default}_per_worker_lazy_infos"] = lazy
    local = default_local_envs(num_envs)
    if local:
        remote = math.ceil((num_envs - local) / (cores - 1))
        makers[f"batch_env_{remote}_per_worker_{local}_local"] = lambda: BatchEnv.external(
            env_id, num_envs, local_envs="auto"
        )
    envs = {name: make() for name, make in makers.items()}
    free = FreeRunning(env_id, num_envs, cores)
    names = [*envs, "single_env_loop", "free_running"]
    samples: dict[str, list[float]] = {name: [] for name in names}
    try:
        for _ in range(rounds):
            samples["single_env_loop"].append(rate_single(env_id, seconds))
            samples["free_running"].append(free.rate(seconds))
            for name, env in envs.items():
                samples[name].append(rate_vector(env, seconds))
    finally:
        free.close()
        for env in envs.values():
            env.close()
    rates = {name: statistics.median(values) for name, values in samples.items()}
    best = max(
        (n for n in rates if n.startswith("batch_env") and not n.endswith(("no_spin", "infos"))),
        key=rates.get,
    )
    limit = rates["single_env_loop"] * cores
    return {
        "env": env_id,
        "num_envs": num_envs,
        "steps_per_sec": {name: round(rate) for name, rate in rates.items()},
        "machine_limit": round(limit),
        "batch_env": round(rates[best]),
        "batch_env_best_setting": best.removeprefix("batch_env_"),
        "batch_env_fraction_of_limit": round(rates[best] / limit, 3),
        "batch_env_fraction_of_free_running": round(rates[best] / rates["free_running"], 3),
        "batch_env_over_async_vector_env": round(rates[best] / rates["async_vector_env"], 2),
        "batch_env_over_sync_vector_env": round(rates[best] / rates["sync_vector_env"], 2),
        "lazy_infos_over_plain": round(
            rates[f"batch_env_{default}_per_worker_lazy_infos"]
            / rates[f"batch_env_{default}_per_worker"],
            3,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating repeats; median kept")
    parser.add_argument("--envs", nargs="*", default=TASKS)
    parser.add_argument("--sizes", nargs="*", type=int, default=SIZES)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    cores = len(os.sched_getaffinity(0))
    results = [
        measure(env_id, n, cores, args.seconds, args.rounds)
        for env_id in args.envs
        for n in args.sizes
    ]
    print(
        json.dumps(
            {
                "benchmark": "env_throughput",
                "cores": cores,
                "python": platform.python_version(),
                "gymnasium": gym.__version__,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

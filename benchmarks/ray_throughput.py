"""Ray's cost per batch step: BatchEnv.ray against BatchEnv.external with the same envs.

Prints one JSON line. Starts a local two-node Ray cluster (`ray.cluster_utils.Cluster`)
on this machine. First the transports Ray offers, measured with the payload of a batch
step of 16 HalfCheetah-v5 envs per actor, 2 actors: plain actor calls, async actors and
a compiled graph (µs per round trip to both), on idle cores and with one process per
core stepping MuJoCo, as env workers do. Then env-steps/s of 32 envs stepped by
BatchEnv.external (2 workers of 16 envs) and by BatchEnv.ray (2 actors, one per node,
each with one worker of 16 envs; or 1 actor with both workers; or 2 actors stepping
their 16 envs themselves), for HalfCheetah-v5 and for envs whose step takes 5 ms
(a stand-in for heavy simulators), in alternating rounds; the median of the rounds is
kept. Ray's overhead per batch step is the difference of the two step times; with 1
and 2 actors it gives the fit overhead = fixed + per_actor * actors that the README's
model of growth with nodes uses.

    python benchmarks/ray_throughput.py [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import statistics
import time

import numpy as np

try:
    import ray
    from ray.cluster_utils import Cluster
except ModuleNotFoundError:
    raise SystemExit(
        "ray_throughput.py runs on Ray, which is not installed: pip install -e '.[ray]'"
    ) from None

from batchrl.envs import BatchEnv
from batchrl.testing import mock

NUM_ENVS = 32
SLOW_STEP = 0.005  # Seconds per step of the stand-in for a heavy simulator.
VARIANTS = {
    "ray_2_actors": {"actors": 2, "envs_per_worker": 16},  # A worker of 16 envs per actor.
    "ray_1_actor": {"actors": 1, "envs_per_worker": 16},  # Two workers in one actor.
    "ray_2_actors_in_actor": {"actors": 2, "local_envs": 16},  # Envs in the actors: no hop.
}


class Echo:
    """Answers a step's actions with arrays the size of a HalfCheetah batch's results."""

    def __init__(self, envs: int):
        self.results = (
            np.zeros((envs, 17), np.float32),
            np.zeros(envs),
            np.zeros(envs, bool),
            np.zeros(envs, bool),
            0,
        )

    def step(self, actions: np.ndarray) -> tuple:
        return self.results


class AsyncEcho(Echo):
    """Echo as an async actor."""

    async def step(self, actions: np.ndarray) -> tuple:
        return self.results


def round_trips(call, seconds: float) -> float:
    """µs per call of `call()` over about `seconds`, after a warm-up."""
    for _ in range(20):
        call()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def _busy(stop) -> None:
    """Steps a HalfCheetah-v5 until `stop` is set: the load env workers put on a core."""
    import gymnasium as gym

    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    while not stop.is_set():
        if any(env.step(env.action_space.sample())[2:4]):
            env.reset()


def transports(seconds: float, busy: bool = False) -> dict:
    """µs per round trip to two actors (one per node) with each transport Ray offers.

    `busy`: while one process per core steps a MuJoCo env, as env workers do.
    """
    if busy:
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        loads = [context.Process(target=_busy, args=(stop,)) for _ in range(os.cpu_count())]
        for load in loads:
            load.start()
        try:
            return transports(seconds)
        finally:
            stop.set()
            for load in loads:
                load.join()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def placed(cls, node):
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        return ray.remote(cls).options(num_cpus=0, scheduling_strategy=strategy).remote(16)

    actions = np.zeros((16, 6), np.float32)
    out = {}
    for name, cls in (("plain_actor_calls", Echo), ("async_actors", AsyncEcho)):
        actors = [placed(cls, node) for node in nodes]
        out[name] = round(
            round_trips(lambda a=actors: ray.get([x.step.remote(actions) for x in a]), seconds)
        )
        for actor in actors:
            ray.kill(actor)
    actors = [placed(Echo, node) for node in nodes]
    ray.get([actor.step.remote(actions) for actor in actors])
    try:
        from ray.dag import InputNode, MultiOutputNode

        with InputNode() as given:
            dag = MultiOutputNode([a.step.bind(given[i]) for i, a in enumerate(actors)])
        compiled = dag.experimental_compile()
        try:
            call = lambda: ray.get(compiled.execute(actions, actions))  # noqa: E731
            out["compiled_graph"] = round(round_trips(call, seconds))
        finally:
            compiled.teardown()
    except Exception as error:  # An unsupported setup is a result too.
        out["compiled_graph"] = f"failed: {type(error).__name__}: {str(error)[:200]}"
    for actor in actors:
        ray.kill(actor)
    return out


def rate(env: BatchEnv, seconds: float, seed: int = 0) -> float:
    """Env-steps/s of `env.step` with uniform random actions, after a warm-up."""
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    actions = rng.uniform(space.low, space.high, (64, *env.action_space.shape))
    actions = actions.astype(space.dtype)
    env.reset(seed=seed)
    for a in actions[:10]:
        env.step(a)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            env.step(a)
        steps += len(actions) * env.num_envs
    return steps / (time.perf_counter() - start)


def compare(make, seconds: float, rounds: int, variants: dict[str, dict]) -> dict:
    """Median env-steps/s of external and of each variant of BatchEnv.ray, alternating."""
    builders = {"external": lambda: BatchEnv.external(make, NUM_ENVS, envs_per_worker=16)}
    for name, options in variants.items():
        builders[name] = functools.partial(BatchEnv.ray, make, NUM_ENVS, **options)
    rates: dict[str, list[float]] = {name: [] for name in builders}
    for number in range(rounds):
        order = list(builders) if number % 2 == 0 else list(reversed(builders))
        for name in order:
            with builders[name]() as env:
                rates[name].append(rate(env, seconds))
    median = {name: statistics.median(values) for name, values in rates.items()}
    result = {
        "env_steps_per_sec": {name: round(value) for name, value in median.items()},
        "rounds": {name: [round(v) for v in values] for name, values in rates.items()},
    }
    batch_step = {name: NUM_ENVS / value * 1e6 for name, value in median.items()}
    result["batch_step_us"] = {name: round(value) for name, value in batch_step.items()}
    result["ray_overhead_us"] = {
        name: round(batch_step[name] - batch_step["external"])
        for name in batch_step
        if name != "external"
    }
    result["ray_over_external"] = {
        name: round(median[name] / median["external"], 3) for name in median if name != "external"
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        result = {
            "benchmark": "ray_throughput",
            "num_envs": NUM_ENVS,
            "nodes": 2,
            "transport_us_per_round_trip_2_actors": transports(args.seconds),
            "transport_us_with_every_core_busy": transports(args.seconds, busy=True),
            "HalfCheetah-v5": compare("HalfCheetah-v5", args.seconds, args.rounds, VARIANTS),
            f"step_{SLOW_STEP * 1e3:g}ms": compare(
                functools.partial(mock.CountingEnv, duration=1000, step_seconds=SLOW_STEP),
                args.seconds,
                args.rounds,
                {"ray_2_actors": VARIANTS["ray_2_actors"]},
            ),
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["machine"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "ray": ray.__version__,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

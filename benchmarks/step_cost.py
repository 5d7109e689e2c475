"""Where a train phase's wall-clock goes on worker envs: env time, update time, and the rest.

Prints one JSON line. For each preset, the train command's env (worker processes, the
preset's layout) and programs run `--phases` train phases; the first compiles and is
reported apart. In the same run:

- env: the same BatchEnv stepped for the same number of batch steps by a do-nothing
  policy (random actions drawn beforehand), resetting the envs that ended as the bridge does;
- env in run: the time the phase's host calls spent in the BatchEnv (the bridge's count);
- update: the update the agent makes next, compiled alone and timed on the storage it
  fills acting on from the run's last state, times the updates each phase made;
- rest = phase - env - update: the fused step's own cost.

    python benchmarks/step_cost.py [--presets humanoid ant cheetah cheetah_clipped] [--phases 2]
"""

from __future__ import annotations

import argparse
import json
import time

from batchrl.bridge import xla_threads

xla_threads.limit()  # Before JAX starts: its thread pool would take the workers' cores.

import jax  # noqa: E402
import numpy as np  # noqa: E402

from batchrl import algorithm as algorithm_lib  # noqa: E402
from batchrl import simulate  # noqa: E402
from batchrl.configs import presets  # noqa: E402
from batchrl.ppo import clipped, penalty  # noqa: E402
from batchrl.ppo import config as config_lib  # noqa: E402
from batchrl.scripts import provenance  # noqa: E402
from batchrl.training import environments, loop  # noqa: E402


def env_seconds(batch_env, batch_steps: int, chunk: int = 1000) -> float:
    """Seconds for `batch_steps` steps of random actions, resetting ended envs as the bridge does.

    The actions are drawn uniformly from the action space before the clock starts, so
    the policy costs nothing; zero actions would end episodes at other times than a
    policy's early noisy ones do, and resets are a large part of the env's time.
    """
    space = batch_env.single_action_space
    rng = np.random.default_rng(0)
    shape = (chunk, len(batch_env), *space.shape)
    actions = rng.uniform(space.low, space.high, shape).astype(space.dtype)
    obs = np.zeros((len(batch_env), *batch_env.single_observation_space.shape), np.float32)
    reward = np.zeros(len(batch_env), np.float32)
    terminated, truncated = np.zeros(len(batch_env), bool), np.zeros(len(batch_env), bool)
    batch_env.reset(seed=0)
    start = time.perf_counter()
    for t in range(batch_steps):
        batch_env.step_into(actions[t % chunk], obs, reward, terminated, truncated)
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            batch_env.reset_at(ended)
    return time.perf_counter() - start


def update_seconds(env, networks, state, max_length: int, repeats: int = 3) -> float:
    """Seconds of one update alone, on a storage filled by acting on from the run's state.

    The agent acts until its memory or rollout is ready, as in training; then the update
    it would make is compiled on its own and timed.
    """
    algorithm = algorithm_lib.of(networks.config)

    def fill(sim_state, agent):
        acting_state = algorithm.begin(agent)
        recorder = algorithm.recorder(networks)
        sampling = algorithm.sampling_agent(networks)
        limit = 10 * state.train.length.shape[0] * max_length
        run = simulate.collect(
            env, sampling, sim_state, acting_state, limit, recorder=recorder, storage=agent.storage
        )
        return run[2]

    storage = env.wrap_compiled(jax.jit(fill))(state.train, state.agent)
    if isinstance(networks.config, config_lib.ClippedConfig):
        args = (state.agent.learner, storage.rollout)
        total = state.agent.total_updates
        update = jax.jit(lambda *args: clipped.update(networks, *args, total))
    else:
        args = (state.agent.learner, storage, state.agent.penalty)
        update = jax.jit(lambda *args: penalty.update(networks, *args))
    jax.block_until_ready(update(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(update(*args))
    return (time.perf_counter() - start) / repeats


def measure(name: str, phases: int) -> dict:
    config = presets.get(name)
    batch_steps = config.batch_steps_per_phase
    env, batch_env = environments.build(config)
    try:
        programs, state = loop.build(config, env, eval_steps=1)
        networks = programs.networks
        rows = []
        for _ in range(phases + 1):
            before_env, before_updates = env.env_seconds, int(state.agent.learner.updates)
            state, metrics = loop.run_phase(programs, state)
            rows.append(
                {
                    "seconds": metrics["perf/train_seconds"],
                    "env_in_run": env.env_seconds - before_env,
                    "updates": int(state.agent.learner.updates) - before_updates,
                    "mean_length": metrics["train/length"],
                }
            )
        alone = env_seconds(batch_env, batch_steps)
        one_update = update_seconds(env, networks, state, config.max_length)
    finally:
        batch_env.close()
    rest = [row["seconds"] - alone - one_update * row["updates"] for row in rows[1:]]
    steps = batch_steps * config.num_envs
    return {
        "preset": name,
        "objective": type(config.algorithm).__name__,
        "env_steps_per_phase": steps,
        "first_phase_seconds_with_compile": round(rows[0]["seconds"], 2),
        "phase_seconds": [round(row["seconds"], 2) for row in rows[1:]],
        "env_steps_per_sec": [
            round(batch_steps * config.num_envs / r["seconds"]) for r in rows[1:]
        ],
        "env_seconds": round(alone, 2),
        "env_seconds_in_run": [round(row["env_in_run"], 2) for row in rows[1:]],
        "updates": [row["updates"] for row in rows[1:]],
        "update_seconds_each": round(one_update, 3),
        "rest_seconds": [round(r, 2) for r in rest],
        "rest_fraction": [
            round(r / row["seconds"], 3) for r, row in zip(rest, rows[1:], strict=True)
        ],
        "mean_episode_length": [round(row["mean_length"], 1) for row in rows[1:]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets", nargs="+", default=["humanoid", "ant", "cheetah", "cheetah_clipped"]
    )
    parser.add_argument("--phases", type=int, default=2, help="timed phases after the first")
    args = parser.parse_args()
    results = [measure(name, args.phases) for name in args.presets]
    print(
        json.dumps({"benchmark": "step_cost", "results": results, "machine": provenance.machine()})
    )


if __name__ == "__main__":
    main()

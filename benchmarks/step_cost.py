"""Where a train phase's wall-clock goes on worker envs: env time, update time, and the rest.

Prints one JSON line. For each preset, the train command's env (worker processes, the
preset's layout) and programs run `--phases` train phases; the first compiles and is
reported apart. In the same run:

- env: the same BatchEnv stepped for the same number of batch steps by a do-nothing
  policy (zero actions), resetting the envs that ended as the bridge does;
- env in run: the time the phase's host calls spent in the BatchEnv (the bridge's count);
- update: one of the objective's updates compiled alone and timed on the phase's end
  state (episodes as long as the phase's mean), times the updates the phase made;
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
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from batchrl.configs import presets  # noqa: E402
from batchrl.ppo import clipped, penalty  # noqa: E402
from batchrl.ppo import config as config_lib  # noqa: E402
from batchrl.ppo import policy as policy_lib  # noqa: E402
from batchrl.scripts import sweep  # noqa: E402
from batchrl.training import environments, loop  # noqa: E402


def env_seconds(batch_env, batch_steps: int) -> float:
    """Seconds for `batch_steps` steps of zero actions, resetting ended envs as the bridge does."""
    space = batch_env.single_action_space
    action = np.zeros((len(batch_env), *space.shape), space.dtype)
    obs = np.zeros((len(batch_env), *batch_env.single_observation_space.shape), np.float32)
    reward = np.zeros(len(batch_env), np.float32)
    terminated, truncated = np.zeros(len(batch_env), bool), np.zeros(len(batch_env), bool)
    batch_env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(batch_steps):
        batch_env.step_into(action, obs, reward, terminated, truncated)
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            batch_env.reset_at(ended)
    return time.perf_counter() - start


def update_seconds(networks, agent, mean_length: float, repeats: int = 3) -> float:
    """Seconds of one update alone, on the agent's storage made ready to train.

    The KL-penalty memory is given `update_every` finished episodes of `mean_length` steps.
    """
    config = networks.config
    if isinstance(config, config_lib.ClippedConfig):
        args = (agent.learner, agent.storage.rollout)
        update = jax.jit(lambda *args: clipped.update(networks, *args))
    else:
        stored = agent.storage
        length = min(max(round(mean_length), 1), config.max_length)
        stored = stored.replace(
            finished=jnp.arange(stored.slots) < stored.capacity,
            length=jnp.full_like(stored.length, length),
            count=jnp.asarray(stored.capacity, jnp.int32),
        )
        args = (agent.learner, stored, agent.penalty)
        update = jax.jit(lambda *args: penalty.update(networks, *args))
    jax.block_until_ready(update(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(update(*args))
    return (time.perf_counter() - start) / repeats


def measure(name: str, phases: int) -> dict:
    config = presets.get(name)
    algorithm = config.algorithm
    batch_steps = config.batch_steps_per_phase
    env, batch_env = environments.build(config)
    try:
        networks = policy_lib.for_env(algorithm, env)
        programs, state = loop.build(algorithm, env, batch_steps, 1)
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
    finally:
        batch_env.close()
    last = rows[-1]
    one_update = update_seconds(networks, state.agent, last["mean_length"])
    update = one_update * last["updates"]
    rest = [row["seconds"] - alone - update for row in rows[1:]]
    steps = batch_steps * algorithm.num_agents
    return {
        "preset": name,
        "objective": type(algorithm).__name__,
        "env_steps_per_phase": steps,
        "first_phase_seconds_with_compile": round(rows[0]["seconds"], 2),
        "phase_seconds": [round(row["seconds"], 2) for row in rows[1:]],
        "env_steps_per_sec": [
            round(batch_steps * algorithm.num_agents / r["seconds"]) for r in rows[1:]
        ],
        "env_seconds": round(alone, 2),
        "env_seconds_in_run": [round(row["env_in_run"], 2) for row in rows[1:]],
        "updates_per_phase": last["updates"],
        "update_seconds": round(update, 2),
        "rest_seconds": [round(r, 2) for r in rest],
        "rest_fraction": [
            round(r / row["seconds"], 3) for r, row in zip(rest, rows[1:], strict=True)
        ],
        "mean_episode_length": round(last["mean_length"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets", nargs="+", default=["humanoid", "ant", "cheetah", "cheetah_clipped"]
    )
    parser.add_argument("--phases", type=int, default=2, help="timed phases after the first")
    args = parser.parse_args()
    results = [measure(name, args.phases) for name in args.presets]
    print(json.dumps({"benchmark": "step_cost", "results": results, "machine": sweep.machine()}))


if __name__ == "__main__":
    main()

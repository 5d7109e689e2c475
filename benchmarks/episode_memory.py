"""Train phases of the seed's `humanoid` preset on a compiled stand-in for Humanoid-v5.

Prints one JSON line. The stand-in has Humanoid-v5's shapes (348-float observations,
17 actions in [-0.4, 0.4]) and random dynamics whose episodes end with probability
1 / `--episode-length` a step, so the KL-penalty agent's episode memory (30 envs,
60 x 1,000 steps) and its updates cost what they cost on Humanoid, with no MuJoCo and
no worker processes in the way. Each phase is `--steps` env steps; the first, which
compiles, is reported apart.

    python benchmarks/episode_memory.py [--steps 60000] [--phases 2] [--episode-length 38]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.configs import presets
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env
from batchrl.scripts import provenance
from batchrl.training import loop

OBSERVATION_SIZE, ACTION_SIZE = 348, 17
SPEC = EnvSpec(
    env_spec_lib.vector((OBSERVATION_SIZE,)),
    discrete=False,
    action_shape=(ACTION_SIZE,),
    action_low=(-0.4,) * ACTION_SIZE,
    action_high=(0.4,) * ACTION_SIZE,
)


@dataclasses.dataclass(frozen=True)
class StandIn:
    """Humanoid-v5's shapes; random observations; an episode ends with probability `end`."""

    end: float
    max_length: int = 1000
    env_spec: EnvSpec = SPEC

    def reset(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        key, obs_key = jax.random.split(key)
        return key, jax.random.normal(obs_key, (OBSERVATION_SIZE,))

    def step(self, key: jax.Array, action: jax.Array) -> tuple[jax.Array, jax_env.TimeStep]:
        key, obs_key, end_key = jax.random.split(key, 3)
        return key, jax_env.TimeStep(
            obs=jax.random.normal(obs_key, (OBSERVATION_SIZE,)) + action.sum(),
            reward=action.sum() + 1.0,
            terminated=jax.random.uniform(end_key) < self.end,
            truncated=jnp.zeros((), bool),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60_000, help="env steps a phase")
    parser.add_argument("--phases", type=int, default=2, help="phases after the first")
    parser.add_argument("--episode-length", type=float, default=38.0, help="mean length")
    args = parser.parse_args()

    preset = presets.humanoid()
    num_envs = preset.num_envs
    stand_in = StandIn(end=1.0 / args.episode_length)
    stand_in = jax_env.TimeLimit(stand_in, stand_in.max_length)
    env = jax_env.VmapBatch(stand_in, num_envs)
    batch_steps = args.steps // num_envs
    programs, state = loop.build(preset, env, train_steps=batch_steps, eval_steps=10)
    train, agent = state.train, state.agent

    def phase(reset: bool) -> float:
        nonlocal train, agent
        start = time.perf_counter()
        train, agent = programs.train(train, agent, reset)
        return time.perf_counter() - start

    first = phase(True)
    seconds = [phase(False) for _ in range(args.phases)]
    env_steps = batch_steps * num_envs
    print(
        json.dumps(
            {
                "benchmark": "episode_memory",
                "preset": "humanoid",
                "env_steps_per_phase": env_steps,
                "mean_episode_length": args.episode_length,
                "first_phase_seconds_with_compile": round(first, 1),
                "phase_seconds": [round(s, 1) for s in seconds],
                "env_steps_per_sec": [round(env_steps / s) for s in seconds],
                "updates": int(agent.learner.updates),
                "machine": provenance.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Short runs of an algorithm on an env a test brings, the loop's phases in a row.

For tests of an algorithm or a phase on an env of their own, without a run folder, a
`TrainConfig` of presets or `batchrl.train`'s keywords.
"""

from __future__ import annotations

from typing import Any

from batchrl import simulate
from batchrl.configs import train_config
from batchrl.training import loop


def config_for(
    config: Any,
    env: simulate.CompiledBatch,
    *,
    max_length: int,
    steps: int,
    seed: int = 0,
    overlap: str = "auto",
) -> train_config.TrainConfig:
    """The run of algorithm `config` on `env`, for tests that bring their env.

    Episodes last at most `max_length` env steps; `steps` is the budget in env steps.
    """
    shape = dict(num_envs=env.num_envs, max_length=max_length, steps=steps)
    return train_config.TrainConfig(algorithm=config, **shape, seed=seed, overlap=overlap)


def train(
    config: Any,
    env: simulate.CompiledBatch,
    train_steps: int,
    eval_steps: int,
    phases: int,
    *,
    max_length: int,
    seed: int = 0,
    overlap: str = "auto",
) -> tuple[list[dict[str, float]], loop.RunState]:
    """Builds and runs `phases` phases, each evaluated; every phase's metrics and the end state.

    For tests of an algorithm `config` on an env of their own: phases of `train_steps`
    and `eval_steps` batch steps, episodes of at most `max_length` steps, the budget the
    schedules read what the phases spend, and `overlap` as the config's setting.
    """
    steps = phases * train_steps * env.num_envs
    whole = config_for(config, env, max_length=max_length, steps=steps, seed=seed, overlap=overlap)
    programs, state = loop.build(whole, env, train_steps=train_steps, eval_steps=eval_steps)
    rows = []
    for number in range(1, phases + 1):
        state, metrics = loop.run_phase(programs, state, eval_episodes=1, final=number == phases)
        rows.append(metrics)
    return rows, state

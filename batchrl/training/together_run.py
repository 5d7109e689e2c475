"""Training N seeds together, each still a run of its own folder.

Each seed keeps the folder a solo run of it would write (config, env spec, metrics and
TensorBoard events, checkpoints, best), through the solo run's `Keeper`, so `evaluate`,
`plot`, `table` and `visualize` read it unchanged, and its rows are the solo run's.
Their phases run as one program (`training.together`). A killed together-run saves
every seed's last logged state and resumes together, from the phase all seeds reached.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from batchrl import simulate
from batchrl.configs import TrainConfig
from batchrl.training import device_memory, environments, loop, metrics_log, run, together

logger = logging.getLogger("batchrl.training")


def train(
    rundirs: Sequence[pathlib.Path | None], configs: Sequence[TrainConfig], env: Any = None
) -> list[run.Run]:
    """Trains the runs of `configs` (one seed each) in `rundirs`, new or to resume, together.

    As `run.train` does for one run: `rundirs` of None train in memory; `env` replaces
    the env the configs name. Returns each seed's `Run`, in the order given.
    """
    if len(rundirs) != len(configs):
        raise ValueError(f"{len(configs)} configs need as many run folders, got {len(rundirs)}")
    config = configs[0]
    env, _ = environments.build(config, env=env)
    group, states = together.build(configs, env)
    programs = group.solo
    states = [
        run.restore(rundir, programs, state, env.env_spec)
        for rundir, state in zip(rundirs, states, strict=True)
    ]
    begun = _common_phase(configs, states)
    total, count = config.phases, len(configs)
    phase_steps = programs.train_steps * programs.num_envs
    progress = metrics_log.Progress(
        total_steps=count * total * phase_steps, initial_steps=count * begun * phase_steps
    )
    _announce(rundirs, group)
    keepers = [
        run.Keeper(rundir, seed_config, state)
        for rundir, seed_config, state in zip(rundirs, configs, states, strict=True)
    ]
    try:
        with contextlib.ExitStack() as opened:
            for keeper in keepers:
                opened.enter_context(keeper)
            opened.enter_context(progress.ticking())
            for done in range(begun + 1, total + 1):
                states, rows = _phase(group, states, keepers, configs, done)
                for keeper, state, metrics in zip(keepers, states, rows, strict=True):
                    keeper.record(state, metrics)
                mean = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
                env_steps = int(states[0].env_steps)
                progress.update(count * env_steps, mean)
                line = metrics_log.summary_line(done, env_steps, mean)
                progress.print(f"{line}  (mean of {count} seeds)")
    except KeyboardInterrupt:
        progress.close()
        for keeper in keepers:
            keeper.save_interrupted()
        raise
    return [keeper.run(programs) for keeper in keepers]


def _phase(
    group: together.Together,
    states: list[loop.RunState],
    keepers: list[run.Keeper],
    configs: Sequence[TrainConfig],
    done: int,
) -> tuple[list[loop.RunState], list[dict[str, float]]]:
    """Phase `done` of every seed: their states after it and their metrics rows."""
    programs, config = group.solo, configs[0]
    final = done == config.phases
    stacked = together.stack(states)
    start = time.perf_counter()
    reset = jax.numpy.asarray(programs.shared_envs)
    train_state, agent = group.train(simulate.clear_summary(stacked.train), stacked.agent, reset)
    seconds = time.perf_counter() - start
    trained = together.unstack(stacked.replace(train=train_state, agent=agent), group.seeds)
    after, rows = [], []
    for keeper, state, seed_trained in zip(keepers, states, trained, strict=True):
        new_state, metrics = loop.finish_phase(
            programs, state, seed_trained, seconds, average_with=keeper.average_with(final)
        )
        after.append(new_state)
        rows.append(metrics)
    episodes = run.eval_episodes(config, done)
    if episodes:
        start = time.perf_counter()
        stacked = together.stack(after)
        eval_state, summaries = together.evaluate(group, stacked.eval, stacked.agent, episodes)
        seconds = time.perf_counter() - start
        after = together.unstack(stacked.replace(eval=eval_state), group.seeds)
        for keeper, metrics, summary in zip(keepers, rows, summaries, strict=True):
            metrics.update({f"eval/{k.split('/')[1]}": v for k, v in summary.items()})
            metrics["perf/eval_seconds"] = seconds
            if final:
                loop.add_final(metrics, keeper.average_with(final))
    for metrics in rows:
        metrics["perf/seeds_together"] = float(group.seeds)
    return after, rows


def _common_phase(configs: Sequence[TrainConfig], states: Sequence[loop.RunState]) -> int:
    """The phase every seed resumes from; a one-line ValueError when they differ."""
    phases = [int(state.phases) for state in states]
    if len(set(phases)) > 1:
        found = ", ".join(
            f"seed {config.seed} at phase {phase}"
            for config, phase in zip(configs, phases, strict=True)
        )
        raise ValueError(
            f"the seeds resume from different phases ({found}): resume each on its own"
        )
    return phases[0]


def _announce(rundirs: Sequence[pathlib.Path | None], group: together.Together) -> None:
    """The first line: the folders, the devices, the storage of all seeds."""
    programs = group.solo
    storage = device_memory.human(group.seeds * programs.storage_bytes)
    folders = [str(rundir) for rundir in rundirs if rundir is not None]
    where = f"run folders {folders[0]} ... {folders[-1]}" if folders else "in memory"
    print(
        f"{group.seeds} seeds together, {where}; {programs.where.describe()}; "
        f"storage {storage} ({device_memory.human(programs.storage_bytes)} a seed); "
        "compiling the first phase",
        flush=True,
    )

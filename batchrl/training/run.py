"""One training run in its folder: build or restore, alternate phases, log, checkpoint, stop.

The whole training state (`loop.RunState`: agent, train and eval simulation states,
counters) is one pytree, returned by every phase; the run checkpoints exactly the state
that came back, atomically, after every `checkpoint_every` phases, and on Ctrl-C or SIGTERM
the last state whose metrics row is written. Resuming loads the newest good checkpoint
into a freshly built state; phases it re-does write their rows again, and readers keep
the last row of each (`results.phases`).

The state of the phase with the highest evaluation return so far is also kept, as
`best.bin` beside the checkpoints: a policy can fall in its last updates (docs/results.md,
Hopper), and a user then wants the best one it had, as SB3's `EvalCallback` keeps it.
"""

from __future__ import annotations

import logging as std_logging
import math
import pathlib
from typing import Any

from batchrl.configs import TrainConfig
from batchrl.training import checkpoint, environments, loop, memory, results
from batchrl.training import logging as logs

CHECKPOINTS = "checkpoints"
logger = std_logging.getLogger("batchrl.training")


def train(rundir: pathlib.Path, config: TrainConfig) -> int:
    """Trains until the budget is spent or the user interrupts; returns the exit status."""
    env, batch_env = environments.build(config)
    try:
        return _train(rundir, config, env, batch_env)
    finally:
        if batch_env is not None:
            batch_env.close()


def _train(rundir: pathlib.Path, config: TrainConfig, env: Any, batch_env: Any) -> int:
    steps_per_phase = config.batch_steps_per_phase
    programs, state = loop.build(
        config.algorithm,
        env,
        steps_per_phase,
        config.eval_batch_steps,
        max_length=config.max_length,
        steps=config.steps,
        seed=config.seed,
    )
    directory = rundir / CHECKPOINTS
    restored = checkpoint.load_latest(directory, state)
    if restored is not None:
        state = restored[1]
        logger.warning(
            "resumed %s at env step %d (phase %d)",
            rundir.name,
            int(state.env_steps),
            int(state.phases),
        )
    best = _best_return(rundir, int(state.env_steps))
    total_phases = config.phases
    total_steps = total_phases * steps_per_phase * env.num_envs
    progress = logs.Progress(total_steps=total_steps, initial_steps=int(state.env_steps))
    storage = memory.human(programs.storage_bytes)
    print(f"run folder {rundir}; storage {storage}; compiling the first phase", flush=True)
    writer = logs.Writer(rundir)
    # The state whose metrics row is written: an interrupt between a phase's return and its
    # row must not checkpoint that phase, or a resumed run would lack the row for good.
    logged = state
    try:
        phases = loop.run(
            programs,
            state,
            total_phases - int(state.phases),
            eval_every=config.eval_every,
            final_episodes=config.final_episodes,
            total=total_phases,
        )
        with progress.ticking():
            for state, metrics in phases:
                done, env_steps = int(state.phases), int(state.env_steps)
                if batch_env is not None:  # Env workers replaced so far in this process.
                    metrics["perf/worker_restarts"] = float(batch_env.restarts)
                writer.write(env_steps, metrics)
                logged = state
                progress.update(env_steps, metrics)
                if done % config.checkpoint_every == 0 or done == total_phases:
                    checkpoint.save(directory, done, state, config.keep_checkpoints)
                score = metrics.get("eval/return", math.nan)
                if score > best:  # False for NaN: a phase that was not evaluated.
                    checkpoint.save_best(directory, done, state)
                    best = score
                progress.print(logs.summary_line(done, env_steps, metrics))
    except KeyboardInterrupt:
        progress.close()
        checkpoint.save(directory, int(logged.phases), logged, config.keep_checkpoints)
        print(f"interrupted: saved a checkpoint at env step {int(logged.env_steps)}", flush=True)
        return 130
    finally:
        writer.close()
    return 0


def _best_return(rundir: pathlib.Path, env_steps: int) -> float:
    """The highest evaluation return of the phases up to `env_steps`; -inf before any.

    A resumed run re-does the phases after its checkpoint, and `best.bin` follows their rows.
    """
    path = rundir / logs.JSONL_NAME
    rows = results.phases(logs.read_jsonl(path)) if path.exists() else []
    scores = [
        row["eval/return"]
        for row in rows
        if row["step"] <= env_steps and row.get("eval/return") is not None
    ]
    return max(scores, default=-math.inf)

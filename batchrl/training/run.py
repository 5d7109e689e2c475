"""One training run, in its folder or in memory: build or restore, alternate phases, log, stop.

The whole training state (`loop.RunState`: agent, train and eval simulation states,
counters) is one pytree, returned by every phase; a run with a folder checkpoints exactly
the state that came back, atomically, after every `checkpoint_every` phases, and on
Ctrl-C or SIGTERM the last state whose metrics row is written. Resuming loads the newest
good checkpoint into a freshly built state; phases it re-does write their rows again, and
readers keep the last row of each (`results.phases`). The folder's layout is
`run_folder`'s; a run without a folder keeps only what it returns.

The state of the phase with the highest evaluation return so far is also kept, as
`best.bin` beside the checkpoints: a policy can fall in its last updates (a held-out
Hopper seed from 3,712 to 1,371 in its last phase, its kept best scoring 3,708 again),
and a user then wants the best one it had, as SB3's `EvalCallback` keeps it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import pathlib
from typing import Any

from batchrl.configs import TrainConfig
from batchrl.training import (
    checkpoint,
    environments,
    loop,
    memory,
    metrics_log,
    results,
    run_folder,
    tail_average,
)

logger = logging.getLogger("batchrl.training")


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run returns: its last state, the programs that ran it, the rows it wrote.

    Attributes:
        state: The state after the last phase (the restored one when none was left).
        programs: The run's compiled phases, its algorithm and networks.
        metrics: `{"step": env steps, **metrics}` of each phase this call ran, in order.
    """

    state: loop.RunState
    programs: loop.Programs
    metrics: list[dict[str, float]]


def train(rundir: pathlib.Path | None, config: TrainConfig, env: Any = None) -> Result:
    """Trains until the budget is spent; the run's `Result`.

    `rundir` None trains in memory: no logs, no checkpoints. `env`, when given, is the
    env in place of the one `config.env` names (`environments.build`). Ctrl-C or SIGTERM
    (as KeyboardInterrupt) saves a checkpoint of the last logged state, then is raised on.
    """
    with contextlib.ExitStack() as opened:
        batched, batch_env = environments.build(config, env=env)
        if batch_env is not None:
            opened.callback(batch_env.close)
        evaluation = environments.build_eval(config)  # None: evaluation steps the same envs.
        if evaluation is not None:
            opened.callback(evaluation[1].close)
        eval_env = None if evaluation is None else evaluation[0]
        return _train(rundir, config, batched, batch_env, eval_env)


def _train(
    rundir: pathlib.Path | None, config: TrainConfig, env: Any, batch_env: Any, eval_env: Any
) -> Result:
    programs, state = loop.build(config, env, eval_env=eval_env)
    directory = None if rundir is None else run_folder.checkpoints(rundir)
    if rundir is not None:
        run_folder.write_spec(rundir, env.env_spec)
        restored = checkpoint.load_latest(directory, state)
        if restored is not None:
            state = loop.place(programs, restored[1])
            logger.warning(
                "resumed %s at env step %d (phase %d)",
                rundir.name,
                int(state.env_steps),
                int(state.phases),
            )
    best = -math.inf if rundir is None else _best_return(rundir, int(state.env_steps))
    total_phases = config.phases
    total_steps = total_phases * programs.train_steps * env.num_envs
    progress = metrics_log.Progress(total_steps=total_steps, initial_steps=int(state.env_steps))
    storage = memory.human(programs.storage_bytes)
    where = "in memory" if rundir is None else f"run folder {rundir}"
    devices = programs.where.describe()
    print(f"{where}; {devices}; storage {storage}; compiling the first phase", flush=True)
    writer = None if rundir is None else metrics_log.Writer(rundir)
    # The state whose metrics row is written: an interrupt between a phase's return and its
    # row must not checkpoint that phase, or a resumed run would lack the row for good.
    logged, rows = state, []
    try:
        phases = loop.run(
            programs,
            state,
            total_phases - int(state.phases),
            eval_every=config.eval_every,
            final_episodes=config.final_episodes,
            total=total_phases,
            average_last=config.average_last,
            earlier=_earlier_params(directory, state, config.average_last),
        )
        with writer or contextlib.nullcontext(), progress.ticking():
            for state, metrics in phases:
                done, env_steps = int(state.phases), int(state.env_steps)
                if batch_env is not None:  # Env workers replaced so far in this process.
                    metrics["perf/worker_restarts"] = float(batch_env.restarts)
                if writer is not None:
                    writer.write(env_steps, metrics)
                rows.append({"step": env_steps, **metrics})
                logged = state
                progress.update(env_steps, metrics)
                if directory is not None:
                    if done % config.checkpoint_every == 0 or done == total_phases:
                        checkpoint.save(directory, done, state, config.keep_checkpoints)
                    score = metrics.get("eval/return", math.nan)
                    if score > best:  # False for NaN: a phase that was not evaluated.
                        checkpoint.save_best(directory, done, state)
                        best = score
                progress.print(metrics_log.summary_line(done, env_steps, metrics))
    except KeyboardInterrupt:
        progress.close()
        if directory is not None:
            checkpoint.save(directory, int(logged.phases), logged, config.keep_checkpoints)
            step = int(logged.env_steps)
            print(f"interrupted: saved a checkpoint at env step {step}", flush=True)
        raise
    return Result(state=state, programs=programs, metrics=rows)


def _earlier_params(
    directory: pathlib.Path | None, state: loop.RunState, average_last: int
) -> list:
    """The parameters of the kept phases before `state`'s that its final policy may average.

    A resumed run's last phases average these with their own (`tail_average`); a fresh
    run, or one without a folder, has none.
    """
    done = int(state.phases)
    if directory is None or average_last < 2 or not done:
        return []
    target = tail_average.params(state.agent)
    wanted = [phase for phase in checkpoint.steps(directory) if done - average_last < phase < done]
    part = ("agent", "learner", "params")
    return [
        checkpoint.load(checkpoint.path_for(directory, phase), target, part) for phase in wanted
    ]


def _best_return(rundir: pathlib.Path, env_steps: int) -> float:
    """The highest evaluation return of the phases up to `env_steps`; -inf before any.

    A resumed run re-does the phases after its checkpoint, and `best.bin` follows their rows.
    """
    path = run_folder.metrics(rundir)
    rows = results.phases(metrics_log.read_jsonl(path)) if path.exists() else []
    scores = [
        row["eval/return"]
        for row in rows
        if row["step"] <= env_steps and row.get("eval/return") is not None
    ]
    return max(scores, default=-math.inf)

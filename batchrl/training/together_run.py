"""Training N seeds together, each still a run of its own folder.

Each seed keeps the folder its solo run would write (config, env spec, metrics, events,
checkpoints, best) through the solo run's `Keeper`, read unchanged by `evaluate`, `plot`,
`table` and `visualize`; their phases run as one program (`training.together`). A killed
together-run saves each seed's last logged state and resumes from the phase all reached.
"""

from __future__ import annotations

import contextlib
import logging
import math
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from batchrl import simulate
from batchrl.configs import TrainConfig
from batchrl.envs.host import errors
from batchrl.training import (
    checkpoint,
    device_memory,
    diverged_seeds,
    environments,
    loop,
    phase_row,
    run,
    run_folder,
    run_signals,
    session,
    tail_average,
    terminal,
    together,
    together_checks,
    together_host,
    together_memory,
)
from batchrl.training.diverged_seeds import DivergedError
from batchrl.training.keeper import Keeper, restore, say_resumed
from batchrl.training.keeper_thread import KeeperThread, wait_all

logger = logging.getLogger("batchrl.training")


def train(
    rundirs: Sequence[pathlib.Path | None], configs: Sequence[TrainConfig], env: Any = None
) -> list[run.Run]:
    """Trains the runs of `configs` (one seed each) in `rundirs`, new or to resume, together.

    As `run.train` does for one run: `rundirs` of None train in memory; `env` replaces
    the env the configs name. Returns each seed's `Run`, in the order given. Seeds whose
    numbers turn non-finite stop; the others train on to their budget (in memory: stop
    too), and then a `DivergedError` names them. What each
    seed keeps of a phase (rows, checkpoints) is written in a thread of its own beside
    the next phase, from one copy of all seeds' states to the host.
    """
    if len(rundirs) != len(configs):
        raise ValueError(f"{len(configs)} configs need as many run folders, got {len(rundirs)}")
    together_checks.check_configs(configs)  # Before any env worker starts.
    finished = [_finished(r, c) for r, c in zip(rundirs, configs, strict=True)]
    if any(finished) and not all(finished):  # Seeds added to finished ones train alone.
        parts = {
            side: [i for i, done in enumerate(finished) if done == side] for side in (True, False)
        }
        runs = {
            side: iter(train([rundirs[i] for i in part], [configs[i] for i in part], env))
            for side, part in parts.items()
        }
        return [next(runs[done]) for done in finished]
    try:
        return _together(rundirs, configs, env)
    except DivergedError as diverged:
        # Anew: the error's traceback would hold every seed's state through the retraining.
        stopped = DivergedError(diverged.seeds, diverged.said)
    them = "it" if len(stopped.seeds) == 1 else "them"
    rest = [i for i, c in enumerate(configs) if c.seed not in stopped.seeds]
    if not rest:
        raise stopped
    if any(rundir is None for rundir in rundirs):  # No checkpoint to train on from.
        raise DivergedError(stopped.seeds, stopped.said, f"the other seeds stopped with {them}")
    # The others go on from their last checkpoints, as a resume without it would.
    others = diverged_seeds.named([configs[i].seed for i in rest])
    how = f"trains on without {them}, from its last checkpoint"
    if len(rest) > 1:
        how = f"train on without {them}, from their last checkpoints"
    logger.warning("%s; %s %s", stopped, others, how)
    try:
        train([rundirs[i] for i in rest], [configs[i] for i in rest], env)
    except DivergedError as later:  # Another seed of the rest: both said.
        stopped = DivergedError([*stopped.seeds, *later.seeds], [*stopped.said, *later.said])
    trained = [c.seed for c in configs if c.seed not in stopped.seeds]
    them = "it" if len(stopped.seeds) == 1 else "them"
    said = f"{diverged_seeds.named(trained)} trained on without {them}" if trained else ""
    raise DivergedError(stopped.seeds, stopped.said, said)


def _together(
    rundirs: Sequence[pathlib.Path | None], configs: Sequence[TrainConfig], env: Any
) -> list[run.Run]:
    """`train` of seeds none of which has finished: their envs and program built, trained."""
    config = configs[0]
    with contextlib.ExitStack() as opened:
        for rundir, seed_config in zip(rundirs, configs, strict=True):
            opened.enter_context(run_folder.held(rundir))
            session.check(rundir, seed_config)  # As `run.train`, before any is built.
        if config.jax_native:
            env, _ = environments.build(config, env=env)
            group, states = together.build(configs, env)
        else:
            seeds = [seed_config.seed for seed_config in configs]
            env, batch_env = environments.build(config, env=env, seeds=seeds)
            opened.callback(batch_env.close)
            group, states = together_host.build(configs, env)
            try:
                return _train(rundirs, configs, env, group, states, lambda: batch_env.restarts)
            except errors.EnvError as error:  # Its envs named by seed too.
                named = together_host.seed_named(error, seeds, config.num_envs)
                raise named.with_traceback(error.__traceback__) from None
        return _train(rundirs, configs, env, group, states)


def _finished(rundir: pathlib.Path | None, config: TrainConfig) -> bool:
    """Whether the run in `rundir` keeps a checkpoint of its last phase: nothing to train."""
    kept = checkpoint.steps(run_folder.checkpoints(rundir)) if rundir is not None else []
    return bool(kept) and kept[-1] >= config.phases


def _train(
    rundirs: Sequence[pathlib.Path | None],
    configs: Sequence[TrainConfig],
    env: Any,
    group: together.Together,
    states: list[loop.RunState],
    restarts: Callable[[], int] | None = None,
) -> list[run.Run]:
    """`train` once its env and programs are built; `restarts` counts env workers replaced."""
    config = configs[0]
    programs = group.solo
    storages = [state.agent.storage for state in states]  # As built: what an emptied one is.
    restored = [
        restore(rundir, programs, state, env.env_spec)
        for rundir, state in zip(rundirs, states, strict=True)
    ]
    for rundir, seed_config, state in zip(rundirs, configs, restored, strict=True):
        run.check_not_lowered(rundir, seed_config, int(state.phases))
    states = _common_phase(rundirs, configs, programs, states, restored)
    begun = int(states[0].phases)
    total, count = config.phases, len(configs)
    if begun >= total:  # Resumed after its last phase, as `run.train`: nothing to write.
        for rundir in rundirs:
            print(f"run folder {rundir} has trained {terminal.phases_said(total)}", flush=True)
        return [
            run.Run(rundir, seed_config, [], state, programs)
            for rundir, seed_config, state in zip(rundirs, configs, states, strict=True)
        ]
    run.seed_restarts(begun, env)  # Its envs, shared by evaluation, restart first.
    for rundir, seed_config, state in zip(rundirs, configs, states, strict=True):
        say_resumed(rundir, state)
        session.begin(rundir, seed_config)  # Once restored, as `run.train`.
    phase_steps = programs.train_steps * programs.num_envs
    progress = terminal.Progress(
        count * total * phase_steps, count * begun * phase_steps, seeds=count
    )
    _announce(rundirs, group, terminal.rounded_budget(configs[0].steps, total, phase_steps))
    keepers = [
        Keeper(rundir, seed_config, state, programs.algorithm)
        for rundir, seed_config, state in zip(rundirs, configs, states, strict=True)
    ]
    stacked = group.stack(states)
    compiling = time.perf_counter()
    _check_memory(group, stacked, states)  # Compiles the phase: its time is the first's.
    compiled = time.perf_counter() - compiling
    # A thread a seed, so the seeds' checkpoints are written side by side.
    threads = [KeeperThread(keeper) for keeper in keepers]
    try:
        with contextlib.ExitStack() as opened:
            for keeper in keepers:
                opened.enter_context(keeper)
            opened.enter_context(progress.ticking())
            received = opened.enter_context(run_signals.signals_kept())
            opened.enter_context(run_signals.stopping_over_env_errors(received))
            for thread in threads:  # Left first: the last records end under the handlers.
                opened.enter_context(thread)
            restart = run.first_restart(group.solo, config, states[0])  # As `run.train`'s.
            restarted = run.restarts_before(rundirs[0], int(states[0].env_steps))
            for done in range(begun + 1, total + 1):
                run_signals.raise_received(received)
                if done == total and config.average_last > 1:  # Tails end at the last phase.
                    wait_all(threads)
                stacked, rows = _phase(group, stacked, keepers, config, done, restart, compiled)
                compiled = 0.0
                restart = run.restart_after(group.solo, config, done)  # As `run.train`'s.
                if restarts is not None:  # Every seed's env workers replaced so far.
                    for row in rows:
                        row["perf/worker_restarts"] = restarted + restarts()
                wait_all(threads)  # Raises what the last phase's records raised.
                hosts = _to_host(group, stacked, storages)
                for thread, host, row in zip(threads, hosts, rows, strict=True):
                    thread.record(host, row)
                mean = _mean_row(rows)
                env_steps = int(rows[0]["perf/env_steps"])
                progress.update(count * env_steps, mean)
                line = terminal.summary_line(done, env_steps, mean)
                progress.print(f"{line}  (mean of {terminal.counted(count, 'seed')})")
            run_signals.raise_received(received)  # A signal in the last phase still stops it.
        wait_all(threads)
    except DivergedError:
        progress.close()  # The warning that the others train on starts a line of its own.
        raise
    except KeyboardInterrupt:
        progress.close()
        for thread in threads:
            thread.close()
        for keeper in keepers:
            keeper.save_interrupted()
        raise
    return [run.finished(kept, programs) for kept in keepers]


def _phase(
    group: together.Together,
    stacked: loop.RunState,
    keepers: list[Keeper],
    config: TrainConfig,
    done: int,
    restart: bool = False,
    compiled: float = 0.0,
) -> tuple[loop.RunState, list[dict[str, float]]]:
    """Phase `done` of every seed, as `loop.run_phase` runs one: their states and rows.

    `compiled`: seconds the phase's program took to compile before it, which its train
    seconds count, as a solo run's first phase counts its compile.
    """
    programs = group.solo
    final = done == config.phases
    updates = programs.algorithm.updates
    before = jax.device_get(updates(stacked.agent.learner))  # Each seed's; the phase may donate.
    start = time.perf_counter()
    reset = jax.numpy.asarray(restart)
    train_state, agent = group.train(simulate.clear_summary(stacked.train), stacked.agent, reset)
    seconds = time.perf_counter() - start + compiled
    updated = jax.device_get(updates(agent.learner)) != before
    tails = [keeper.average_with(final) for keeper in keepers]
    if tails[0]:  # Each seed's earlier parameters, stacked phase by phase.
        agent = tail_average.averaged(
            agent, [together.stack(phase) for phase in zip(*tails, strict=True)]
        )
    values = jax.device_get(group.metrics(train_state, agent.learner))
    rows = [
        {name: float(value[seed]) for name, value in values.items()} for seed in range(group.seeds)
    ]
    phase_steps = programs.train_steps * programs.num_envs
    env_steps = int(stacked.env_steps[0]) + phase_steps
    diverged_seeds.check_finite(
        group, agent.learner, rows, env_steps, [k.config.seed for k in keepers]
    )
    for row, learned in zip(rows, updated, strict=True):
        if not learned:
            phase_row.drop_update_metrics(row, programs.algorithm)
        phase_row.add_perf(row, env_steps, phase_steps, seconds, 0.0)
        row["perf/seeds_together"] = float(group.seeds)
    stacked = loop.RunState(
        agent=agent,
        train=train_state,
        eval=stacked.eval,
        env_steps=stacked.env_steps + phase_steps,
        phases=stacked.phases + 1,
    )
    episodes = run.eval_episodes(config, done)
    if episodes:
        start = time.perf_counter()
        eval_state, summaries = together.evaluate(group, stacked.eval, stacked.agent, episodes)
        seconds = time.perf_counter() - start
        stacked = stacked.replace(eval=eval_state)
        for row, summary, tail in zip(rows, summaries, tails, strict=True):
            row.update(phase_row.summary_as("eval", summary))
            row["perf/eval_seconds"] = seconds
            if final:
                phase_row.add_final(row, tail)
    return stacked, rows


def _to_host(
    group: together.Together, stacked: loop.RunState, storages: list[Any]
) -> list[loop.RunState]:
    """Each seed's state on the host; an emptied storage is not copied but taken as built.

    A rollout buffer is the larger part of a state (13 of 17 MiB a seed on MinAtar), and
    one emptied at a phase's end is written before it is read again.
    """
    if bool(jax.numpy.any(group.solo.algorithm.holds_steps(stacked.agent))):
        return group.unstack(stacked)
    hosts = group.unstack(stacked.replace(agent=stacked.agent.replace(storage=())))
    return [
        host.replace(agent=host.agent.replace(storage=storage))
        for host, storage in zip(hosts, storages, strict=True)
    ]


def _common_phase(
    rundirs: Sequence[pathlib.Path | None],
    configs: Sequence[TrainConfig],
    programs: loop.Programs,
    built: Sequence[loop.RunState],
    restored: Sequence[loop.RunState],
) -> list[loop.RunState]:
    """Every seed's state at the newest phase all reached, from their checkpoints.

    A run killed between two seeds' checkpoints of a phase resumes at the phase before,
    which every seed keeps; a one-line ValueError when some seed has no checkpoint there,
    or when a seed with no checkpoint (its folder deleted) would take the others back
    further than a kill between checkpoints can, to their first phase.
    """
    phases = [int(state.phases) for state in restored]
    common = min(phases)
    states = list(restored)
    for i, (rundir, phase) in enumerate(zip(rundirs, phases, strict=True)):
        if phase == common:
            continue
        path = checkpoint.path_for(run_folder.checkpoints(rundir), common)
        try:  # Phase 0 is the state as built, every seed's within a checkpoint of it.
            if common == 0 and phase > configs[i].checkpoint_every:  # A folder new or emptied.
                raise checkpoint.CheckpointError(f"no checkpoint of phase 0 in {rundir}")
            states[i] = (
                built[i] if common == 0 else loop.place(programs, checkpoint.load(path, built[i]))
            )
        except checkpoint.CheckpointError:
            found = ", ".join(
                f"seed {config.seed} at phase {phase}"
                for config, phase in zip(configs, phases, strict=True)
            )
            each = ", ".join(  # With its seed: the folder named for it starts seed 0 else.
                f"--seed {c.seed} --timestamp {run_folder.parse(f.name)[0]}"
                for c, f in zip(configs, rundirs, strict=True)
            )
            # A seed new to the run, or whose folder is gone, is the one to name.
            new = [str(c.seed) for c, p in zip(configs, phases, strict=True) if p == common == 0]
            why = (
                f"seed {' and '.join(new)} trained none"
                if new
                else f"seed {configs[i].seed} keeps no checkpoint of phase {common}"
            )
            raise ValueError(
                f"the seeds resume from different phases ({found}) and {why}: resume each on "
                f"its own ({each}; a sweep: without --together)"
            ) from None
        logger.warning("%s goes back to phase %d, as the other seeds", rundir.name, common)
    return states


def _check_memory(
    group: together.Together, stacked: loop.RunState, states: list[loop.RunState]
) -> None:
    """Compiles the train phase and refuses, in one line, one that would not fit memory."""
    if group.program is None:  # Acting and learning apart: no one program to read.
        return
    reset = jax.numpy.asarray(False)  # As `_phase` gives it: a boolean.
    train = simulate.clear_summary(stacked.train)
    peak = together_memory.peak(group.program, train, stacked.agent, reset)
    if peak is not None:
        held = device_memory.nbytes(stacked) + device_memory.nbytes(states)
        together_memory.check_phase(peak, group.seeds, held, group.solo.where.learner)


def _announce(
    rundirs: Sequence[pathlib.Path | None], group: together.Together, budget: str
) -> None:
    """The first line: the folders, the devices, the storage of all seeds, `budget`'s clause."""
    programs = group.solo
    storage = device_memory.human(group.seeds * programs.storage_bytes)
    folders = [str(rundir) for rundir in rundirs if rundir is not None]
    where = f"run folders {folders[0]} ... {folders[-1]}" if folders else "in memory"
    if len(folders) == 1:
        where = f"run folder {folders[0]}"
    print(
        f"{terminal.counted(group.seeds, 'seed')} together, {where}; {programs.where.describe()}; "
        f"storage {storage} ({device_memory.human(programs.storage_bytes)} a seed){budget}; "
        "compiling their programs",
        flush=True,
    )


def _mean_row(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each key's mean over the seeds that have it, for the terminal's line.

    Seeds of the penalty objective update in phases of their own, so some seeds' rows
    lack the update's keys (a KeyError ended the run); a seed whose episodes all ran on
    has a NaN return, left out as a solo line leaves it out.
    """
    mean = {}
    for key in dict.fromkeys(key for row in rows for key in row):
        values = [float(row[key]) for row in rows if row.get(key) is not None]
        values = [value for value in values if not math.isnan(value)]
        mean[key] = float(np.mean(values)) if values else math.nan
    return mean

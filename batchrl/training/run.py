"""One training run, in its folder or in memory: build or restore, alternate phases, log, stop.

The whole training state (`loop.RunState`: agent, train and eval simulation states,
counters) is one pytree, returned by every phase; a run with a folder checkpoints exactly
the state that came back, atomically, after every `checkpoint_every` phases, and on
Ctrl-C or SIGTERM the last state whose metrics row is written: the phase in flight's,
once it is finished, or with a second signal the one before. Resuming loads the newest
good checkpoint into a freshly built state; phases it re-does write their rows again, and
readers keep the last row of each (`results.phases`). The folder's layout is
`run_folder`'s; a run without a folder keeps only what it returns.

The state of the phase with the highest evaluation return so far is also kept, as
`best.bin` beside the checkpoints: a policy can fall in its last updates (a held-out
Hopper seed from 3,712 to 1,371 in its last phase, its kept best scoring 3,708 again),
and a user then wants the best one it had, as SB3's `EvalCallback` keeps it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import math
import pathlib
from typing import Any

import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl.configs import TrainConfig
from batchrl.training import (
    checkpoint,
    device_memory,
    environments,
    loop,
    metrics_log,
    results,
    reuse,
    run_folder,
    run_signals,
    tail_average,
    terminal,
)
from batchrl.training.policy import Policy

logger = logging.getLogger("batchrl.training")


@dataclasses.dataclass(frozen=True)
class Run:
    """A finished run: where it is kept, its config, its metrics and its final policy.

    Attributes:
        rundir: The run folder; None for a run trained in memory.
        config: The config it trained with.
        metrics: One row per train phase this call ran, `{"step": env steps, **metrics}`;
            the rows that hold `eval/return` are its evaluations (of the mean action, or
            of sampled actions where the config sets `eval_sample`).
        state: The run state after its last phase (the restored one when none was left).
        programs: Its compiled phases, algorithm, networks and devices.
    """

    rundir: pathlib.Path | None
    config: TrainConfig
    metrics: list[dict[str, float]]
    state: loop.RunState
    programs: loop.Programs

    @functools.cached_property
    def policy(self) -> Policy:
        """The policy its last phase left."""
        programs, learner = self.programs, self.state.agent.learner
        return Policy(programs.algorithm, programs.networks, learner, seed=self.config.seed)

    @property
    def evaluations(self) -> list[dict[str, float]]:
        """The rows of the phases that were evaluated."""
        return [row for row in self.metrics if "eval/return" in row]

    def __repr__(self) -> str:
        """One line, as a notebook or `print(run)` shows it; not the state's arrays."""
        rundir = None if self.rundir is None else str(self.rundir)
        parts = [f"rundir={rundir!r}", f"env={self.config.env!r}", f"seed={self.config.seed}"]
        parts.append(f"steps={int(self.state.env_steps)}")
        if self.evaluations:
            parts.append(f"eval_return={self.evaluations[-1]['eval/return']:.6g}")
        return f"Run({', '.join(parts)})"


def train(rundir: pathlib.Path | None, config: TrainConfig, env: Any = None) -> Run:
    """Trains the run in `rundir`, new or to resume, until its budget is spent.

    `rundir` None trains in memory: no logs, no checkpoints. `env`, when given, is the
    env in place of the one `config.env` names (`environments.build`). Phase k is
    evaluated when k is a multiple of `eval_every`, and the last always, until at least
    `final_episodes` episodes ended; its row also carries `final/return` and
    `final/episodes`. With `average_last` K above 1, the final policy's parameters are
    the mean of those its last K phases ended with (`tail_average`), read back from the
    checkpoints of a resumed run. Ctrl-C or SIGTERM lets the phase in flight finish and
    be kept (`run_signals.signals_kept`), saves a checkpoint of it and raises KeyboardInterrupt; a
    second one stops at once, with a checkpoint of the phase before. A folder that
    another process trains is refused in one line (`run_folder.held`).
    """
    with contextlib.ExitStack() as opened:
        opened.enter_context(run_folder.held(rundir))  # Before any env worker starts.
        run_folder.record_budget(rundir, config)
        if config.rollout_actors:  # The envs, and acting on them, in Ray actors.
            from batchrl.training import rollout_actors  # Ray is an optional dependency.

            env = batch_env = rollout_actors.RolloutEnv(config, env)
            opened.callback(batch_env.close)
            eval_env = env.eval_games()  # Atari's, in the actors too.
        else:
            env, batch_env = environments.build(config, env=env)
            if batch_env is not None:
                opened.callback(batch_env.close)
            evaluation = environments.build_eval(config)  # None: it steps the same envs.
            if evaluation is not None:
                opened.callback(evaluation[1].close)
            eval_env = None if evaluation is None else evaluation[0]
        programs, state = loop.build(config, env, eval_env=eval_env)
        state = restore(rundir, programs, state, env.env_spec)
        total = config.phases
        if int(state.phases) >= total:  # Resumed after its last phase: nothing to write.
            trained = f"all its {total} phases" if total > 1 else "its 1 phase"
            print(f"run folder {rundir} has trained {trained}", flush=True)
            return Run(rundir, config, [], state, programs)
        progress = terminal.Progress(
            total_steps=total * programs.train_steps * programs.num_envs,
            initial_steps=int(state.env_steps),
        )
        _announce(rundir, programs, config.rollout_actors)
        keeper = Keeper(rundir, config, state, programs.algorithm)
        restart = first_restart(programs, config, state)
        try:
            with keeper, progress.ticking(), run_signals.signals_kept() as received:
                for done in range(int(state.phases) + 1, total + 1):
                    run_signals.raise_received(received)
                    final = done == total
                    state, metrics = loop.run_phase(
                        programs,
                        state,
                        eval_episodes=eval_episodes(config, done),
                        average_with=keeper.average_with(final),
                        final=final,
                        restart=restart,
                    )
                    restart = restart_after(programs, config, done)
                    if batch_env is not None:  # Env workers replaced so far in this process.
                        metrics["perf/worker_restarts"] = float(batch_env.restarts)
                    env_steps = keeper.record(state, metrics)
                    progress.update(env_steps, metrics)
                    progress.print(terminal.summary_line(done, env_steps, metrics))
                run_signals.raise_received(
                    received
                )  # A signal in the last phase still stops the program.
        except KeyboardInterrupt:
            progress.close()
            keeper.save_interrupted()
            raise
        return keeper.run(programs)


def first_restart(programs: loop.Programs, config: TrainConfig, state: loop.RunState) -> bool:
    """Whether a run's first phase in this process restarts its envs.

    Restored: the checkpoint holds the episodes JAX-native envs were in, no others'.
    Envs that evaluation shares were reset twice as the state was built, once for each.
    """
    return programs.shared_envs or (int(state.phases) > 0 and not config.jax_native)


def restart_after(programs: loop.Programs, config: TrainConfig, done: int) -> bool:
    """Whether the phase after phase `done` restarts the envs: it evaluated on those it shares.

    After a phase without an evaluation, training's episodes go on.
    """
    return programs.shared_envs and eval_episodes(config, done) > 0


def eval_episodes(config: TrainConfig, done: int) -> int:
    """The episodes phase `done` is evaluated on: `final_episodes` for the last, else 0 or 1."""
    if done == config.phases:
        return config.final_episodes
    return int(done % config.eval_every == 0)


class Keeper:
    """What one run keeps of its phases: rows, logs, checkpoints, the best state, the tail.

    The tail is the parameters of its last `average_last` - 1 phases, for the final
    policy's mean. `logged` is the state whose metrics row is written: an interrupt
    between a phase's return and its row must not checkpoint that phase, or a resumed
    run would lack the row for good. What its checkpoint leaves out is found with it, so
    that an interrupt's checkpoint runs no JAX computation: an interrupt that lands in
    JAX's dispatch can leave its caches unusable by that thread (a RecursionError).
    """

    def __init__(
        self,
        rundir: pathlib.Path | None,
        config: TrainConfig,
        state: loop.RunState,
        algorithm: algorithm_lib.Algorithm,
    ):
        self.rundir, self.config, self.algorithm = rundir, config, algorithm
        self.directory = None if rundir is None else run_folder.checkpoints(rundir)
        self.best = -math.inf if rundir is None else _best_return(rundir, state)
        # TensorBoard drops the rows past the state it re-does them from: past a checkpoint,
        # or all of them when the run starts again with rows but no checkpoint (killed first).
        written = rundir is not None and run_folder.metrics(rundir).exists()
        redone = int(state.env_steps) + 1 if int(state.phases) or written else None
        self.writer = None if rundir is None else metrics_log.Writer(rundir, redone)
        self.rows: list[dict[str, float]] = []
        self.kept = (state, () if self.directory is None else _fresh(self.algorithm, state))
        self.tail = collections.deque(maxlen=config.average_last - 1)
        self.tail.extend(_earlier_params(self.directory, state, config.average_last))
        if int(state.phases):
            self.tail.append(tail_average.params(state.agent))

    def __enter__(self) -> Keeper:
        if self.writer is not None:
            self.writer.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.writer is not None:
            self.writer.__exit__(*exc_info)

    def average_with(self, final: bool) -> list | None:
        """The earlier phases' parameters the final phase's policy averages; None before it."""
        return list(self.tail) if final and self.config.average_last > 1 else None

    def record(self, state: loop.RunState, metrics: dict[str, float]) -> int:
        """Keeps the phase that left `state`: its row, checkpoint, best; returns its env steps."""
        self.tail.append(tail_average.params(state.agent))
        done, env_steps = int(state.phases), int(state.env_steps)
        fresh = () if self.directory is None else _fresh(self.algorithm, state)  # Before the row.
        if self.writer is not None:
            self.writer.write(env_steps, metrics)
        self.rows.append({"step": env_steps, **metrics})
        self.kept = (state, fresh)  # One store: an interrupt sees the pair or the one before.
        if self.directory is not None:
            score = metrics.get("eval/return", math.nan)
            best = score > self.best  # False for NaN: a phase that was not evaluated.
            every = done % self.config.checkpoint_every == 0 or done == self.config.phases
            if best or every:
                self.writer.sync()  # A checkpoint on disk has its rows on disk before it.
            # The best first: a kill between the two then re-does this phase, best and all.
            if best:
                checkpoint.save_best(self.directory, done, state, fresh, score)
                self.best = score
            if every:
                checkpoint.save(self.directory, done, state, self.config.keep_checkpoints, fresh)
        return env_steps

    def save_interrupted(self, named: bool = False) -> None:
        """Checkpoints the last logged state, on Ctrl-C or SIGTERM; `named`: says whose."""
        if self.directory is None:
            return
        logged, fresh = self.kept
        checkpoint.save(
            self.directory, int(logged.phases), logged, self.config.keep_checkpoints, fresh
        )
        whose = f" in {self.rundir}" if named else ""  # One of a together-run's seeds.
        steps = int(logged.env_steps)
        print(f"interrupted: saved a checkpoint at env step {steps}{whose}", flush=True)

    def run(self, programs: loop.Programs) -> Run:
        """The finished run: the rows this call wrote and the last state kept."""
        return Run(self.rundir, self.config, self.rows, self.logged, programs)

    @property
    def logged(self) -> loop.RunState:
        """The state whose metrics row was written last, or the one the run began with."""
        return self.kept[0]


def restore(
    rundir: pathlib.Path | None, programs: loop.Programs, state: loop.RunState, spec: Any
) -> loop.RunState:
    """The run folder's newest good checkpoint placed as `state` is; `state` when none.

    Writes the env's spec into the folder first, as every run does. Checkpoints of which
    none loads are a CheckpointError that says what to do.
    """
    if rundir is None:
        return state
    run_folder.remove_partial_files(rundir)  # A killed run's; this one holds the folder.
    run_folder.write_spec(rundir, spec)
    directory = run_folder.checkpoints(rundir)
    try:
        restored = checkpoint.load_latest(directory, state)
    except checkpoint.CheckpointError as error:  # What to do, after what is wrong.
        raise checkpoint.CheckpointError(
            f"{error}; move {str(directory)!r} away to train the run again from its start"
        ) from None
    if restored is None:
        return state
    state = loop.place(programs, restored[1])
    logger.warning(
        "resumed %s at env step %d (phase %d)", rundir.name, int(state.env_steps), int(state.phases)
    )
    _keep_best_of(rundir, state, programs.algorithm)
    return state


def _keep_best_of(
    rundir: pathlib.Path, restored: loop.RunState, algorithm: algorithm_lib.Algorithm
) -> None:
    """Writes `best.bin` from the restored phase if that scored best and `best.bin` lacks it.

    A second Ctrl-C that lands in `Keeper.record` before the phase's `best.bin` is
    written still checkpoints that phase (`save_interrupted`), which a resume does not
    train again: its best is lost unless written here.
    """
    env_steps = int(restored.env_steps)
    scores = _eval_returns(rundir, env_steps)
    if env_steps not in scores or scores[env_steps] < max(scores.values()):
        return
    directory = run_folder.checkpoints(rundir)
    try:
        held = checkpoint.step_of(directory / checkpoint.BEST)
    except (OSError, checkpoint.CheckpointError):
        held = None
    if held != int(restored.phases):
        fresh = _fresh(algorithm, restored)
        checkpoint.save_best(directory, int(restored.phases), restored, fresh, scores[env_steps])


def _fresh(algorithm: algorithm_lib.Algorithm, state: loop.RunState) -> tuple[tuple[str, ...], ...]:
    """What a checkpoint of `state` leaves out: an emptied storage, rebuilt on resume."""
    if bool(np.any(algorithm.holds_steps(state.agent))):
        return ()
    return (("agent", "storage"),)


def _announce(rundir: pathlib.Path | None, programs: loop.Programs, rollout_actors: int) -> None:
    """The first line a run prints: where it is kept, its devices, overlap, its storage's size.

    Rollout actors act on their own nodes' devices, not on the acting device here.
    """
    storage = device_memory.human(programs.storage_bytes)
    where = "in memory" if rundir is None else f"run folder {rundir}"
    devices = programs.where.describe()
    if rollout_actors:
        learner = programs.where.learner_names()
        devices = f"acting in {rollout_actors} Ray actors, learning on {learner}"
    if programs.overlap:
        devices += " (overlapped, acting one version behind)"
    compiling = "compiling the first phase"
    if reuse.taken_again(programs):
        compiling = "programs an earlier run here compiled"
    print(f"{where}; {devices}; storage {storage}; {compiling}", flush=True)


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


def _best_return(rundir: pathlib.Path, state: loop.RunState) -> float:
    """The highest evaluation return of the phases up to `state`'s; -inf before any.

    A resumed run re-does the phases after its checkpoint, and `best.bin` follows their
    rows. A `best.bin` of a phase up to `state`'s counts with the score it holds: rows
    that said it may be gone (a deleted metrics.jsonl), and a later phase that scored
    less would replace the best policy the run had.
    """
    scores = list(_eval_returns(rundir, int(state.env_steps)).values())
    try:
        phase, score = checkpoint.best_of(run_folder.checkpoints(rundir) / checkpoint.BEST)
    except (OSError, checkpoint.CheckpointError):  # None yet, or unreadable: rows decide.
        phase, score = None, None
    if score is not None and phase <= int(state.phases):
        scores.append(score)
    return max(scores, default=-math.inf)


def _eval_returns(rundir: pathlib.Path, env_steps: int) -> dict[int, float]:
    """The evaluation return of each evaluated phase up to `env_steps`, by its env steps."""
    path = run_folder.metrics(rundir)
    rows = results.phases(metrics_log.read_jsonl(path)) if path.exists() else []
    return {
        row["step"]: row["eval/return"]
        for row in rows
        if row["step"] <= env_steps and row.get("eval/return") is not None
    }

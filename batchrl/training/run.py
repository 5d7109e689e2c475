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

import contextlib
import dataclasses
import functools
import logging
import pathlib
import time
from collections.abc import Callable
from typing import Any

from batchrl import bridge
from batchrl.configs import TrainConfig
from batchrl.training import (
    checkpoint,
    device_memory,
    environments,
    loop,
    metrics_log,
    reuse,
    run_folder,
    run_signals,
    session,
    terminal,
    together_memory,
)
from batchrl.training.keeper import Keeper, restore, say_resumed
from batchrl.training.keeper_thread import KeeperThread
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
        return Policy(
            programs.algorithm,
            programs.networks,
            learner,
            seed=self.config.seed,
            config=self.config,
        )

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


def train(
    rundir: pathlib.Path | None,
    config: TrainConfig,
    env: Any = None,
    callback: Callable[[dict[str, Any]], Any] | None = None,
) -> Run:
    """Trains the run in `rundir`, new or to resume, until its budget is spent.

    `callback`, when given, is called with each phase's row once it is kept (written
    and checkpointed); a return of False stops the run there, that phase checkpointed.

    `rundir` None trains in memory: no logs, no checkpoints. `env`, when given, is the
    env in place of the one `config.env` names (`environments.build`). Phase k is
    evaluated when k is a multiple of `eval_every`, and the last always, until at least
    `eval_episodes` and `final_episodes` episodes ended; its row also carries `final/return` and
    `final/episodes`. With `average_last` K above 1, the final policy's parameters are
    the mean of those its last K phases ended with (`tail_average`), read back from the
    checkpoints of a resumed run. Ctrl-C or SIGTERM lets the phase in flight finish and
    be kept (`run_signals.signals_kept`), saves a checkpoint of it and raises KeyboardInterrupt; a
    second one stops at once, with a checkpoint of the phase before (none in the first
    phase: the folder then starts again where it began). A folder that
    another process trains is refused in one line (`run_folder.held`). A signal after
    the last phase was kept, as the run closes its envs, finds it finished (`Finished`).
    """
    ended: list[bool] = []  # True once its phases are all kept: what is left is to close.
    # Phases, once begun, say what a stop kept (`Keeper.save_interrupted`); before, a
    # resumed run's stop (in its first compile) said nothing.
    begun: list[bool] = []
    try:
        return _train(rundir, config, env, callback, ended, begun)
    except KeyboardInterrupt as stop:
        if not begun and rundir is not None and checkpoint.steps(run_folder.checkpoints(rundir)):
            terminal.say(
                f"interrupted before its first phase ended: {rundir} keeps its checkpoints, "
                "which a resume goes on from\n"
            )
        if not any(ended) or isinstance(stop, run_signals.Finished):
            raise
        terminal.say(f"finished in {rundir or 'memory'}: the signal came as it closed\n")
        raise run_signals.Finished(f"{stop} after the run's last phase") from None


def _train(
    rundir: pathlib.Path | None,
    config: TrainConfig,
    env: Any,
    callback: Callable[[dict[str, Any]], Any] | None,
    ended: list[bool],
    begun: list[bool],
) -> Run:
    """`train`'s run; `begun` gets True as its phases begin, `ended` once the last is kept."""
    with contextlib.ExitStack() as opened:
        opened.enter_context(run_folder.held(rundir))  # Before any env worker starts.
        session.check(rundir, config)  # Its settings the last session's, before any is built.
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
        check_raised_after_final(rundir, config, programs, int(state.phases))
        check_not_lowered(rundir, config, int(state.phases))
        total = config.phases
        if int(state.phases) >= total:  # Resumed after its last phase: nothing to write.
            terminal.say(f"run folder {rundir} has trained {terminal.phases_said(total)}\n")
            return Run(rundir, config, [], state, programs)
        say_resumed(rundir, state)
        seed_restarts(int(state.phases), env, eval_env)
        session.begin(rundir, config)  # Once restored: a failed resume writes none.
        progress = terminal.Progress(
            total_steps=total * programs.train_steps * programs.num_envs,
            initial_steps=int(state.env_steps),
        )
        phase_steps = programs.train_steps * programs.num_envs
        budget = terminal.rounded_budget(config.steps, total, phase_steps)
        _announce(rundir, programs, config.rollout_actors, budget)
        compiling = time.perf_counter()
        together_memory.check_solo(programs, state)  # Compiles the first phase.
        compiled = time.perf_counter() - compiling
        keeper = Keeper(rundir, config, state, programs.algorithm)
        restart = first_restart(programs, config, state)
        restarted = restarts_before(rundir, int(state.env_steps))
        begun.append(True)
        try:
            with (
                keeper,
                progress.ticking(),
                run_signals.signals_kept() as received,
                run_signals.stopping_over_env_errors(received),
                KeeperThread(keeper) as kept,  # Left first: its records end under the handlers.
            ):
                for done in range(int(state.phases) + 1, total + 1):
                    run_signals.raise_received(received)
                    final = done == total
                    if final and config.average_last > 1:
                        kept.wait()  # The tail the final policy averages ends at the last phase.
                    state, metrics = loop.run_phase(
                        programs,
                        state,
                        eval_episodes=eval_episodes(config, done),
                        average_with=keeper.average_with(final),
                        final=final,
                        restart=restart,
                        compiled=compiled,
                    )
                    restart, compiled = restart_after(programs, config, done), 0.0
                    if batch_env is not None:  # Env workers replaced so far.
                        metrics["perf/worker_restarts"] = restarted + batch_env.restarts
                    kept.record(state, metrics)
                    env_steps = int(state.env_steps)
                    progress.update(env_steps, metrics)
                    progress.print(terminal.summary_line(done, env_steps, metrics))
                    if callback is not None:
                        kept.wait()  # The callback sees a phase once it is kept.
                        if callback({"step": env_steps, **metrics}) is False:
                            keeper.save_stopped()
                            break
                kept.wait()
                if received and int(keeper.logged.phases) == total:  # Its phases all kept.
                    raise run_signals.Finished(f"signal {received[0]} in the run's last phase")
                run_signals.raise_received(received)
        except run_signals.Finished:
            progress.close()
            where = "memory" if rundir is None else rundir
            terminal.say(f"finished in {where}: the signal came in its last phase\n")
            raise
        except KeyboardInterrupt:
            progress.close()
            keeper.save_interrupted()
            raise
        ended.append(int(keeper.logged.phases) == total)
        progress.close()  # A line a tick drew after a callback stopped the run, say.
        return finished(keeper, programs)


def check_not_lowered(rundir: pathlib.Path | None, config: TrainConfig, done: int) -> None:
    """A one-line ValueError for a run that trained `done` phases, past its config's budget.

    `steps` lowered in config.yaml by hand: the run was said to have trained "all its"
    fewer phases, and the resume exited 0.
    """
    if rundir is not None and done > config.phases:
        raise ValueError(
            f"run {rundir.name!r} trained {done} phases, past steps={config.steps} "
            f"({config.phases}) in its {run_folder.CONFIG}: a budget may be raised, not lowered"
        )


def check_raised_after_final(
    rundir: pathlib.Path | None, config: TrainConfig, programs: loop.Programs, done: int
) -> None:
    """A one-line ValueError for a raised budget past a final phase that changed the state.

    A run that finished its budget with overlap trained the update left pending in its
    last phase, and one with `average_last` keeps averaged parameters: trained on, either
    learns other updates than a run started with the larger budget.
    """
    if rundir is None or not (rundir / run_folder.CONFIG).exists():
        return
    saved = run_folder.read_config(rundir)
    if config.steps <= saved.steps or done < saved.phases:
        return
    what = [
        "overlap, whose last phase trained the update left pending" if programs.overlap else "",
        f"average_last={config.average_last}, which averaged its last phases' parameters"
        if config.average_last > 1
        else "",
    ]
    what = [part for part in what if part]
    if what:
        raise ValueError(
            f"run {rundir.name!r} finished its budget of steps={saved.steps} with "
            f"{' and '.join(what)}: trained on, it would learn other updates than a run "
            "started with the larger budget; start a new run"
        )


def restarts_before(rundir: pathlib.Path | None, env_steps: int) -> float:
    """The env workers a run replaced before the phase it resumes at, as its rows say.

    A process counts those it replaces; a resumed run's count went back to 0.
    """
    path = None if rundir is None else run_folder.metrics(rundir)
    if path is None or not path.exists():
        return 0.0
    rows = [row for row in metrics_log.read_jsonl(path) if row.get("step", 0) <= env_steps]
    return float(rows[-1].get("perf/worker_restarts", 0.0)) if rows else 0.0


def seed_restarts(phases: int, *envs: Any) -> None:
    """Seeds the first restart of each host env of a run resumed after `phases` anew.

    Built as at the run's start, they began its first episodes again (`resumed_after`).
    """
    for env in envs:
        if phases and isinstance(env, bridge.InGraphBatchEnv):
            env.resumed_after(phases)


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
    """The episodes phase `done` is evaluated on, at least; 0: none.

    `eval_episodes` every `eval_every`-th, and the last phase the larger of it and
    `final_episodes` (an evaluation as every other, and the final policy's), each in
    whole rounds of the envs (`loop.evaluate`). Before, `eval_episodes` asked one round,
    whatever it said: blackjack's 200 were 8; and the last took `final_episodes` alone,
    a score of 16 episodes that `best.bin` held against others' 32.
    """
    if done == config.phases:
        return max(config.final_episodes, config.eval_episodes)
    return config.eval_episodes if done % config.eval_every == 0 else 0


def finished(kept: Keeper, programs: loop.Programs) -> Run:
    """The run `kept` kept: the rows this call wrote and the last state kept.

    A run whose whole budget ended before its first update is said in a warning: it
    returned the untrained policy's scores, as a trained one's, without a word.
    """
    config, phases = kept.config, int(kept.logged.phases)
    if phases >= config.phases and not kept.updated():
        algorithm = config.algorithm
        if algorithm.objective == "clipped":
            every = f"{config.num_envs * algorithm.steps_per_update:,} env steps"
            every += f" (num_envs={config.num_envs} x steps_per_update"
            every += f"={algorithm.steps_per_update})"
        else:
            every = f"update_every={algorithm.update_every} episodes"
        logger.warning(
            "the run trained no update: its %s env steps ended before the first, which "
            "comes after %s; raise steps for a trained policy",
            f"{int(kept.logged.env_steps):,}",
            every,
        )
    return Run(kept.rundir, kept.config, kept.rows, kept.logged, programs)


def _announce(
    rundir: pathlib.Path | None, programs: loop.Programs, rollout_actors: int, budget: str
) -> None:
    """The first line a run prints: where it is kept, its devices, overlap, its storage.

    `budget` says how its steps round up to whole phases, where they do. Rollout actors
    act on their own nodes' devices, not on the acting device here.
    """
    storage = device_memory.human(programs.storage_bytes)
    where = "in memory" if rundir is None else f"run folder {rundir}"
    devices = programs.where.describe()
    if rollout_actors:
        learner = programs.where.learner_names()
        devices = f"acting in {rollout_actors} Ray actors, learning on {learner}"
    if programs.overlap:
        devices += " (overlapped, acting one version behind)"
    compiling = "compiling its programs"
    if reuse.taken_again(programs):
        compiling = "programs an earlier run here compiled"
    terminal.say(f"{where}; {devices}; storage {storage}{budget}; {compiling}\n")

"""What a resumed run makes of its `best.bin`: the best evaluated phase of its own history.

A resume trains again the phases after its checkpoint. `best.bin` must then hold a phase
up to that checkpoint, the best one its rows score, or none: a `best.bin` of a later
phase (a kill between a phase's best and its checkpoint, or a newest checkpoint that did
not load) is the best of phases trained again, which on host envs score anew, and
`load(best=True)` and `evaluate --best` would have read a policy no row of the run holds.
"""

from __future__ import annotations

import logging
import math
import pathlib
from typing import Any

from batchrl.training import checkpoint, loop, metrics_log, results, run_folder

logger = logging.getLogger("batchrl.training")
# The rollout or episode memory, which `best.bin` always leaves out: a policy (`load`,
# `evaluate --best`) reads none of it and no resume starts from `best.bin`. The seed's
# `humanoid` holds up to 147 MB of running episodes there.
STORAGE = (("agent", "storage"),)
_LEARNER = ("agent", "learner")  # What `load` reads of `best.bin`: the policy.


def set_aside_later(rundir: pathlib.Path, done: int) -> None:
    """Renames a `best.bin` of a phase past `done`, which the run trains again, out of its way.

    Kept as `skipped-best.bin`, as a corrupt one is (`best_return`): a policy that scored
    what it holds, in phases the run no longer has.
    """
    path = run_folder.checkpoints(rundir) / checkpoint.BEST
    try:
        phase = checkpoint.step_of(path)
    except (OSError, checkpoint.CheckpointError):  # None, or corrupt: `best_return`'s.
        return
    if phase > done:
        path.rename(path.with_name(f"skipped-{path.name}"))
        after = f"after phase {done}" if done else "from its start"
        logger.warning(
            "%s holds phase %d, which the run trains again (it resumes %s): set aside as "
            "skipped-%s",
            path,
            phase,
            after,
            path.name,
        )


def keep_best_of(rundir: pathlib.Path, restored: loop.RunState) -> None:
    """Writes `best.bin` from the best evaluated phase up to `restored` where it lacks it.

    A second Ctrl-C that lands in `Keeper.record` before the phase's `best.bin` is
    written still checkpoints that phase (`save_interrupted`), which a resume does not
    train again: its best is lost unless written here. Where no `best.bin` is left (one
    set aside by `set_aside_later`, or deleted), the best phase's checkpoint is written
    in its place while the run still keeps it.
    """
    done, env_steps = int(restored.phases), int(restored.env_steps)
    scores = _eval_returns(rundir, env_steps)
    if not scores or not done:
        return
    # The first phase of the best score is the best, as in `Keeper.record`: not a tie.
    steps = max(scores, key=lambda steps: (scores[steps], -steps))
    best, score = steps * done // env_steps, scores[steps]
    path = run_folder.checkpoints(rundir) / checkpoint.BEST
    try:
        kept = checkpoint.step_of(path)
    except (OSError, checkpoint.CheckpointError):
        kept = None
    if kept == best or (path.exists() and best != done):
        return
    state = restored
    if best != done:
        try:
            state = checkpoint.load(checkpoint.path_for(path.parent, best), restored)
        except checkpoint.CheckpointError:  # Rotated away, or corrupt.
            logger.warning(
                "phase %d, the best evaluated before phase %d, is no longer kept: the next "
                "evaluation is kept as the run's best",
                best,
                done + 1,
            )
            return
    checkpoint.save_best(path.parent, best, state, STORAGE, score)


def best_return(rundir: pathlib.Path, state: loop.RunState) -> float:
    """The score a phase after `state`'s must beat to be kept as the best; -inf before any.

    A resumed run re-does the phases after its checkpoint, and `best.bin` follows their
    rows. A `best.bin` of a phase up to `state`'s counts with the score it holds: rows
    that said it may be gone (a deleted metrics.jsonl), and a later phase that scored
    less would replace the best policy the run had. Without one, or with one that does
    not load into this run's policy (corrupt, or another run's, then set aside), the next
    evaluated phase is kept.
    """
    scores = list(_eval_returns(rundir, int(state.env_steps)).values())
    path = run_folder.checkpoints(rundir) / checkpoint.BEST
    if not path.exists():
        return -math.inf
    try:
        phase, score = checkpoint.best_of(path)
        checkpoint.load(path, state.agent.learner, _LEARNER)  # Another run's stood for it.
    except checkpoint.CheckpointError as error:  # Kept on, unsaid, past any later phase.
        path.rename(path.with_name(f"skipped-{path.name}"))
        logger.warning("%s; set aside as skipped-%s: the next evaluation is kept", error, path.name)
        return -math.inf
    if score is not None and phase <= int(state.phases):
        scores.append(score)
    return max(scores, default=-math.inf)


def _eval_returns(rundir: pathlib.Path, env_steps: int) -> dict[int, float]:
    """The finite evaluation return of each phase up to `env_steps`, by its env steps."""
    path = run_folder.metrics(rundir)
    rows = results.phases(metrics_log.read_jsonl(path)) if path.exists() else []
    return {
        row["step"]: row["eval/return"]
        for row in rows
        if row["step"] <= env_steps and _finite(row.get("eval/return"))
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)

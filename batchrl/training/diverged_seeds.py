"""A together-run's seeds whose learner became non-finite: found, and said by seed.

One diverged seed need not stop the others: `together_run.train` trains them on from
their last checkpoints without it, and then raises `DivergedError` naming it.
"""

from __future__ import annotations

from typing import Any

from batchrl.training import together


class DivergedError(FloatingPointError):
    """Seeds of a together-run whose learner became non-finite, each `said` its line.

    `others`: what the other seeds did, ending the line.
    """

    def __init__(self, seeds: list[int], said: list[str], others: str = ""):
        self.seeds, self.said = seeds, said
        super().__init__("; ".join([*said, others] if others else said))


def named(seeds: list[int]) -> str:
    """'seed 4', or 'seeds 4, 5 and 9': the seeds a line speaks of."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}"


def check_finite(
    group: together.Together,
    learners: Any,
    rows: list[dict[str, float]],
    env_steps: int,
    seeds: list[int],
) -> None:
    """The algorithm's `check_finite` over every seed at once; its error names the seed."""
    worst = {name: sum(row[name] for row in rows) for name in rows[0]}  # NaN or inf if any is.
    try:
        group.solo.algorithm.check_finite(learners, worst, env_steps)
    except FloatingPointError:
        pass
    else:
        return
    host = together.unstack(learners, len(seeds))
    diverged, said = [], []
    for seed, learner, row in zip(seeds, host, rows, strict=True):
        try:
            group.solo.algorithm.check_finite(learner, row, env_steps)
        except FloatingPointError as error:  # Every such seed: `train` goes on without them.
            diverged.append(seed)
            said.append(f"seed {seed}: {error}")
    if diverged:
        raise DivergedError(diverged, said)

"""Per-task statistics of a sweep's seeds, with bootstrap intervals, and a performance profile.

Reads the JSON lines `batchrl.scripts.sweep` prints (one per run: config, seed, final
return), or makes them from run folders (those of `train --seeds`, say: give the folders or
the folder that holds them; a run's config is its folder name's part after the last "-"),
and prints one JSON line: per config, every seed's final return, the IQM (the mean of the
middle half), mean and median with 95 % percentile bootstrap intervals over seeds, the worst
seed, and each as a fraction of the task's target, the best published PPO at 1M steps; the
task is the env the runs trained, from their lines' settings (`task_of`: `cheetah_clipped`
given `env=Hopper-v5` is held to Hopper's). With `--out`, draws the performance profile
across tasks: for each threshold, the fraction of runs whose score divided by its target
exceeds it, tasks weighted equally, with a 95 % band from resampling each task's runs (a
stratified bootstrap). These are the statistics of Agarwal et al. (2021), as their rliable
library computes them; rliable 1.2 cannot run beside pandas 3 (its `arch` dependency fails
either to import or to take rliable's arguments), so SciPy's bootstrap computes them here.
Reacher's returns are negative, so its fraction is the target divided by the score: 1 is the
target there too, above 1 better.

`--score best` reads each run's best evaluation along training instead of its final
policy's return: the number some published tables give (Tianshou's), biased upwards as
the best of many noisy evaluations is. `--score kept` reads the policy the run kept as
its best (`best.bin`), evaluated again on many episodes (`sweep --evaluate-best`): what a
user who takes the best policy gets.

Runs of one config's name but other settings (two sweeps of a preset, each with its
own `--set learning_rate=...`) are counted apart, each named by the settings that
differ: `pendulum_jax [learning_rate=0.0001]` (`variants`). A run (name and seed) listed
in several files counts its last line; a note on stderr names the runs a later file
lists again.

    python -m batchrl.scripts.stats runs/sweep/results.jsonl --out profile.png
    python -m batchrl.scripts.stats runs/heldout      # the run folders of train --seeds
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats

from batchrl.configs import presets
from batchrl.scripts import command_line, image_out, json_lines, run_lines, variants

# The best published PPO at 1M steps on Gymnasium's v5 tasks: Tianshou's MuJoCo table (each
# run's best evaluation along training, v3 tasks), and for HalfCheetah the RL Zoo's tuned
# agent run on v5 on this project's 2-core machine (above Tianshou's 5,784).
TARGETS = {
    "HalfCheetah-v5": 7115.0,
    "Hopper-v5": 2609.0,
    "Walker2d-v5": 3588.0,
    "Ant-v5": 3258.0,
    "Humanoid-v5": 787.0,
    "Reacher-v5": -4.1,
    # gymnax's README: its own PPO checkpoints at 10M steps (an MLP; no sticky actions,
    # the minimal action set), as the MinAtar presets train.
    "Breakout-MinAtar": 28.0,
    "SpaceInvaders-MinAtar": 131.0,
    "Asterix-MinAtar": 15.0,
    "Freeway-MinAtar": 58.0,
    # Not a published score: the return the minigrid_doorkey preset is held to (0.9 is
    # the goal reached in 28 steps or fewer).
    "MiniGrid-DoorKey-5x5-v0": 0.9,
}
# Presets whose name's first word is another task's.
_PRESET_TASKS = {
    "breakout_minatar": "Breakout-MinAtar",
    "space_invaders_minatar": "SpaceInvaders-MinAtar",
    "asterix_minatar": "Asterix-MinAtar",
    "freeway_minatar": "Freeway-MinAtar",
    "minigrid_doorkey": "MiniGrid-DoorKey-5x5-v0",
}
_TASK_OF = {
    "cheetah": "HalfCheetah-v5",
    "hopper": "Hopper-v5",
    "walker": "Walker2d-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "reacher": "Reacher-v5",
}


def task_of(config: str, env: str | None = None, env_kwargs: dict | None = None) -> str | None:
    """The Gymnasium task a run trains, whose target (`TARGETS`) its scores are divided by.

    From the config's name (`cheetah_clipped`: HalfCheetah-v5; a config named by its task,
    another library's runs, `HalfCheetah-v5`, is that task) where the run's line does not
    say its env (`env`, `env_kwargs`: lines written before lines held their settings), or
    where it trains its preset's own env. A preset trained on another env (`--set
    env=Hopper-v5`) trains that env's task, which has a target only with no `env_kwargs`.
    """
    config = variants.config_of(config)
    named = config if config in TARGETS else None
    named = named or _PRESET_TASKS.get(config) or _TASK_OF.get(config.split("_")[0])
    if env is None or _as_json((env, env_kwargs or {})) == _preset_env(config):
        return named
    return env if env in TARGETS and not env_kwargs else None


def _preset_env(config: str) -> tuple[str, dict] | None:
    """The env and env_kwargs of the preset called `config`; None for another config."""
    if config not in presets.PRESETS:
        return None
    preset = presets.get(config)
    return _as_json((preset.env, dict(preset.env_kwargs)))


def _as_json(value: object) -> object:
    """`value` as a JSON line holds it: tuples as lists, as a line read back has them."""
    return json.loads(json.dumps(value))


def tasks(
    paths: Sequence[pathlib.Path],
    name: Callable[[dict], str] | None = None,
    of: Callable[[str, str | None, dict | None], str | None] = task_of,
) -> dict:
    """Each run name's task (`task_of`, or `of`), from its finished runs' lines in `paths`.

    Runs named alike trained one env: a name's runs that differ in their env are named
    apart (`variants`), so its last line's env is every one's.
    """
    lines = run_lines.finished(paths)
    name = name or variants.namer(record for _, record in lines)
    found = {}
    for _, record in lines:
        settings = record.get("settings") or {}
        found[name(record)] = of(record["config"], settings.get("env"), settings.get("env_kwargs"))
    return found


def env_apart(config: str, env: str | None, env_kwargs: dict | None = None) -> str | None:
    """The env a run of `config` trained, where not its preset's own; None where it was.

    Its env's id, with its `env_kwargs` where the id is the preset's (`HalfCheetah-v5
    {"ctrl_cost_weight": 0.0}`): a `breakout` run on Pong's env, a task of no target, was
    named `breakout` alone.
    """
    config = variants.config_of(config)
    own = _preset_env(config)
    if env is None or env == config or _as_json((env, env_kwargs or {})) == own:
        return None
    return f"{env} {json.dumps(env_kwargs or {})}" if own is not None and env == own[0] else env


def reference(task: str) -> str:
    """What the target of `task` in TARGETS is, as the profile's axis names it."""
    if task.endswith("-MinAtar"):
        return "gymnax's PPO at 10M steps"
    if task.startswith("MiniGrid"):
        return "the minigrid_doorkey preset's target"
    return "best published PPO at 1M steps"


def axis_label(score: str, tasks_drawn: Sequence[str]) -> str:
    """The profile's x axis: the score over the targets of these tasks."""
    references = {reference(task) for task in tasks_drawn}
    target = references.pop() if len(references) == 1 else "each task's target (stats.TARGETS)"
    return f"{SCORES[score][1]} / {target}"


def fraction(score: np.ndarray, target: float) -> np.ndarray:
    """Scores as fractions of the target, 1 at the target and higher for better."""
    return score / target if target > 0 else target / score


# Each score: its field in a sweep's JSON line, and what the profile calls it.
SCORES = {
    "final": ("final_return", "final return", "final policies"),
    "best": ("best_eval_return", "best evaluation along training", "best evaluations"),
    "kept": ("kept_best_return", "kept best policy, evaluated again", "kept best policies"),
}


def read(
    paths: Sequence[pathlib.Path],
    score: str = "final",
    name: Callable[[dict], str] | None = None,
    lacking: bool = False,
) -> dict[str, dict[int, float]]:
    """A score (`SCORES`) by run name and seed; a run listed twice keeps its last line.

    A run's name is its config's, with the settings that set it apart from other runs of
    that name (`variants.namer` of `paths`' lines, unless `name` is given): such runs are
    not one config's seeds. Only a run's last line must hold the score: a sweep run again
    with --evaluate-best adds lines with the kept best policy's return below those it
    wrote without. A run whose last line lacks it is a ValueError, or with `lacking`
    left out.
    """
    field = SCORES[score][0]
    lines = run_lines.finished(paths)
    name = name or variants.namer(record for _, record in lines)
    last: dict[tuple[str, int], tuple[str, dict]] = {}
    for where, record in lines:
        last[name(record), int(record["seed"])] = (where, record)
    runs: dict[str, dict[int, float]] = collections.defaultdict(dict)
    for (config, seed), (where, record) in last.items():
        if field not in record and lacking:
            continue
        if field not in record:
            raise ValueError(
                f"{where} has no {field}"
                + (": run the sweep with --evaluate-best" if score == "kept" else "")
            )
        runs[config][seed] = float(record[field])
    return dict(runs)


def scored(paths: Sequence[pathlib.Path], score: str) -> dict[str, dict[int, float]]:
    """`read`, but for a config none of whose runs holds the score, left out with a note.

    A sweep run on to a raised budget with --evaluate-best keeps the lower budget's
    lines, a config of their own (`variants`) with no kept return. A config holding the
    score for some seeds only is a ValueError naming a line without it.
    """
    final = read(paths)
    if not final:
        raise ValueError("no finished run in the files given")
    runs = read(paths, score, lacking=True)
    if not runs or any(seeds.keys() != final[config].keys() for config, seeds in runs.items()):
        return read(paths, score)  # Raises, naming a line without the score.
    field = SCORES[score][0]
    for config in sorted(final.keys() - runs.keys()):
        print(f"stats: note: {config} left out: its lines have no {field}", file=sys.stderr)
    return runs


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean: the mean of the middle half of the scores."""
    return scipy.stats.trim_mean(scores, 0.25, axis=axis)


AGGREGATES = {"iqm": iqm, "mean": np.mean, "median": np.median}


def summarize(by_seed: dict[int, float], target: float | None, reps: int) -> dict:
    """One config's seeds: IQM, mean and median with 95 % intervals, worst seed, targets."""
    seeds = sorted(by_seed)
    scores = np.array([by_seed[s] for s in seeds])
    summary = {"seeds": seeds, "scores": [round(r, 2) for r in scores.tolist()]}
    for name, aggregate in AGGREGATES.items():
        summary[name] = round(float(aggregate(scores)), 2)
        if len(scores) > 1:
            interval = scipy.stats.bootstrap(
                (scores,),
                lambda x, axis, f=aggregate: f(x, axis=axis),
                n_resamples=reps,
                method="percentile",
                rng=np.random.default_rng(0),
            ).confidence_interval
            summary[f"{name}_95ci"] = [
                round(float(interval.low), 2),
                round(float(interval.high), 2),
            ]
        else:
            summary[f"{name}_95ci"] = [summary[name], summary[name]]
    summary["worst"] = round(float(scores.min()), 2)
    if target is not None:
        summary["target"] = target
        summary["iqm_over_target"] = round(float(fraction(summary["iqm"], target)), 3)
        summary["iqm_95ci_low_over_target"] = round(
            float(fraction(summary["iqm_95ci"][0], target)), 3
        )
        summary["worst_over_target"] = round(float(fraction(scores.min(), target)), 3)
    return summary


def _summary(by_seed: dict[int, float], task: str | None, reps: int) -> dict:
    """`summarize` of one run name's seeds against its task's target, the task named."""
    return {"task": task, **summarize(by_seed, TARGETS.get(task), reps)}


def profile(columns: list[np.ndarray], taus: np.ndarray) -> np.ndarray:
    """For each tau, the fraction of runs above it, each task's runs weighing one task."""
    return np.mean([(c[:, None] > taus).mean(axis=0) for c in columns], axis=0)


def draw_profile(
    runs: dict[str, dict[int, float]],
    out: pathlib.Path,
    reps: int,
    score: str,
    task: dict[str, str | None],
) -> None:
    """The performance profile over every run of the tasks that have a target.

    `task`: each run name's task (`tasks`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    named = {
        config: fraction(np.array(list(seeds.values())), TARGETS[task[config]])
        for config, seeds in sorted(runs.items())
        if task[config] in TARGETS
    }
    if not named:
        raise ValueError(
            "no run of a task with a target, a return to divide its scores by: nothing to "
            f"profile (the tasks with one: {', '.join(TARGETS)})"
        )
    columns = list(named.values())
    taus = np.linspace(0.0, 2.5, 251)
    rng = np.random.default_rng(0)
    resampled = [profile([rng.choice(c, len(c)) for c in columns], taus) for _ in range(reps)]
    low, high = np.percentile(resampled, [2.5, 97.5], axis=0)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    axis.plot(taus, profile(columns, taus), color="tab:blue", label="batchrl")
    axis.fill_between(taus, low, high, color="tab:blue", alpha=0.2, label="95 % interval")
    axis.axvline(1.0, color="grey", linestyle=":")
    policies = SCORES[score][2]
    axis.set_xlabel(axis_label(score, [task[config] for config in named]))
    axis.set_ylabel("fraction of runs above")
    seeds = sorted({len(c) for c in columns})
    counts = f"{seeds[0]}-{seeds[-1]}" if seeds[0] != seeds[-1] else f"{seeds[0]}"
    axis.set_title(f"{len(columns)} tasks, {counts} seeds each, {policies}")
    axis.legend()
    figure.tight_layout()
    image_out.save(figure, out, dpi=120)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.ArgumentParser(
        prog="python -m batchrl.scripts.stats", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "results",
        nargs="+",
        type=pathlib.Path,
        help="a sweep's JSON lines or folder, run folders, or a folder of run folders",
    )
    parser.add_argument(
        "--out", type=pathlib.Path, help="image file to draw the profile in, e.g. profile.png"
    )
    parser.add_argument(
        "--reps", type=int, default=2000, help="bootstrap resamples (default: 2000)"
    )
    parser.add_argument(
        "--score",
        choices=sorted(SCORES),
        default="final",
        help="each run's final return (default), its best evaluation along training, or "
        "its kept best policy evaluated again",
    )
    args = parser.parse_args(argv)
    if args.reps < 1:  # scipy's bootstrap would say it without naming --reps.
        parser.error(f"--reps must be at least 1, got {args.reps}")
    if args.out is not None and image_out.error(args.out):
        parser.error(image_out.error(args.out))
    files = [path / "results.jsonl" if path.is_dir() else path for path in args.results]
    for where in json_lines.cut(files):
        print(f"stats: note: {where} was cut short while written; left out", file=sys.stderr)
    try:
        for note in run_lines.unfinished(args.results) + run_lines.replaced(args.results):
            print(f"stats: note: {note}", file=sys.stderr)
        runs = scored(args.results, args.score)
        task = tasks(args.results)
        summaries = {
            config: _summary(seeds, task[config], args.reps)
            for config, seeds in sorted(runs.items())
        }
    except (OSError, ValueError) as error:
        print(f"stats: error: {error}", file=sys.stderr)
        return 2
    # The statistics first: a profile that cannot be drawn took them with it.
    print(json.dumps({"benchmark": "seed_statistics", "score": args.score, "configs": summaries}))
    if args.out is None:
        return 0
    untargeted = [config for config in sorted(runs) if task[config] not in TARGETS]
    if untargeted and len(untargeted) < len(runs):
        print(
            f"stats: note: the profile leaves out {', '.join(untargeted)}: no target "
            f"(stats.TARGETS) to divide their scores by",
            file=sys.stderr,
        )
    try:
        draw_profile(runs, args.out, args.reps, args.score, task)
    except (OSError, ValueError) as error:
        print(f"stats: error: {error}", file=sys.stderr)
        return 2
    print(f"stats: wrote {args.out}", file=sys.stderr)  # Stdout holds the JSON line alone.
    return 0


if __name__ == "__main__":
    sys.exit(main())

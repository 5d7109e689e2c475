"""The Python entry points: `train` a config into a `Run`; `batchrl.load` reads a `Policy` back.

    import batchrl

    run = batchrl.train("pendulum_jax", steps=20_000, logdir="runs")
    policy = batchrl.load(run.rundir)
    action = policy.act(obs)

`train` does what the train command does, through the same functions (`start`, `run.train`):
it checks the env before a folder exists, keeps XLA to one thread beside env workers,
and writes the same run folder (config, env spec, metrics, checkpoints), which
`evaluate`, `visualize` and `plot` read and the command resumes (`--timestamp`); with
`logdir=None` it trains in memory and writes nothing. Every size derives from the
config once: `steps` is the budget in env steps, and the phases and the schedules'
horizon follow from it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import pathlib
import shutil
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from batchrl import configs
from batchrl.bridge import xla_threads
from batchrl.configs import TrainConfig, backends, config_checks, train_config
from batchrl.envs.host import lifecycle
from batchrl.training import api_arguments, compile_signals, given_env, run_folder, session

if TYPE_CHECKING:
    from batchrl.training.run import Run

logger = logging.getLogger("batchrl.training")


def train(
    config: str | os.PathLike | TrainConfig,
    *,
    env: Any = None,
    steps: int | None = None,
    seed: int | None = None,
    seeds: Sequence[int] | None = None,
    logdir: str | os.PathLike | None = None,
    callback: Callable[[dict[str, Any]], Any] | None = None,
    **settings: Any,
) -> Run | list[Run]:
    """Trains `config` to its budget; the run, its metrics and its final policy.

    Args:
        config: A preset's name (`python -m batchrl.scripts.train --list`), a run folder
            or YAML file whose config to start from (`named_config`), or a `TrainConfig`.
        env: The env in place of the config's: a name (a Gymnasium id, `module:Class`,
            or a JAX-native env's name when the config's backend is JAX-native); a
            constructor (of a Gymnasium env, or of a JAX-native env when the backend is
            JAX-native); a Gymnasium env `gym.make` made, of which each of the run's envs
            is a copy made again from its spec (its id, keywords and step limit, which
            a run folder records, or with wrappers added after `gym.make`, in memory
            only); or a JAX-native env object (the backend becomes "jax"). A run
            folder records the env by name, so a constructor without an importable
            `module:qualname`, a JAX-native env object, a Gymnasium env wrapped after
            `gym.make`, or an id the script or a module of its registers (not
            `module:Id`) trains only with `logdir=None`.
        steps: The budget in env steps.
        seed: The run's seed.
        seeds: Seeds to train together in one program (`training.together`), each a run
            of its own folder `<logdir>/<timestamp>-seed<seed>-<config>`; in place of `seed`.
            A list, a range or an array of ints (`np.arange(10)`).
        logdir: The folder that holds run folders (a run's own is refused); None trains in
            memory.
        callback: Called with each phase's metrics row (`{"step": env steps, ...}`) once
            it is kept, as SB3's callbacks are after each rollout: to log it elsewhere
            (`wandb.log`), or to stop early by returning False (the phase checkpointed).
        **settings: Any key `--set` takes (`num_envs=8`, `objective="clipped"`), as
            values of the key's type.

    Returns:
        The `Run`: its folder (`<logdir>/<timestamp>-<config>`), metrics and policy; with
        `seeds`, a list of them, one a seed.

    Raises:
        ValueError: One line for a bad preset, setting or env (before a folder exists).
        KeyboardInterrupt: Ctrl-C, once the phase in flight is finished and logged (and
            checkpointed, with `logdir`); a second Ctrl-C at once, the phase before kept
            (none in the first).
    """
    lifecycle.check_not_a_workers_start()
    api_arguments.check_callback(callback)
    if seeds is not None:
        if seed is not None:
            raise ValueError(f"give seed or seeds, not both: seed={seed}, seeds={list(seeds)}")
        if callback is not None:
            raise ValueError("callback is called with one run's rows: give seed, not seeds")
        seeds = api_arguments.check_seeds(seeds)
        return _train_together(config, env, steps, seeds, logdir, settings)
    config, name, given = configure(config, env=env, steps=steps, seed=seed, **settings)
    config = given_env.recordable(config, given, logdir)
    config, rundir = start(config, name, logdir, env=given)
    from batchrl.training import run  # Starts JAX's backends: after `start`'s thread limit.

    with compile_signals.stopping(), run_folder.removed_if_refused([rundir]):
        return run.train(rundir, config, env=given, callback=callback)


def resume(
    rundir: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    steps: int | None = None,
    worker_timeout: float | None = None,
    restart_workers: bool | None = None,
    device: str | None = None,
    acting_device: str | None = None,
    learner_devices: int | None = None,
    learner_cores: int | None = None,
    callback: Callable[[dict[str, Any]], Any] | None = None,
) -> Run | list[Run]:
    """Trains the run in `rundir` on from its newest good checkpoint, as `--timestamp` does.

    With its saved config, but for a raised budget (`steps`, as `--set steps=N`), how it
    meets a hung or crashed worker and where it runs (`device="cpu"` for a run begun on
    a GPU; `learner_devices`, equal within float error; `learner_cores`), the settings a
    resume may give anew. A run trained
    with `batchrl.train` and stopped (Ctrl-C in a notebook) goes on from here; `callback`
    is `train`'s. A list of run folders (a together-run's seeds: `[run.rundir for run in
    runs]`) resumes them together, as `train --seeds` with `--timestamp` does, and gives
    a list of `Run`s; `callback` is then not taken.

    Returns:
        The `Run` (for a list, a `Run` a folder, in its order); its metrics are every
        phase's row the folder holds, not only this call's (NaN where the file holds
        null, as `train`'s rows).

    Raises:
        run_folder.RunFolderError: One line for a path that is no run folder.
        ValueError: One line for a lower budget or one a schedule runs over.
    """
    given = {
        "steps": steps,
        "worker_timeout": worker_timeout,
        "restart_workers": restart_workers,
        "device": device,
        "acting_device": acting_device,
        "learner_devices": learner_devices,
        "learner_cores": learner_cores,
    }
    given = {key: value for key, value in given.items() if value is not None}
    lifecycle.check_not_a_workers_start()
    api_arguments.check_callback(callback)
    solo = isinstance(rundir, str | os.PathLike)
    rundirs = api_arguments.rundirs(rundir)
    if callback is not None and not solo:
        raise ValueError("callback is a solo run's: resume a together-run's seeds without it")
    configs = [_resumed_config(folder, given) for folder in rundirs]
    limit_xla_threads(configs[0])
    from batchrl.training import run, together_run  # After the thread limit.

    with compile_signals.stopping():
        if solo:
            done = [run.train(rundirs[0], configs[0], callback=callback)]
        else:
            done = together_run.train(rundirs, configs)
    runs = [_all_rows(kept) for kept in done]
    return runs[0] if solo else runs


def _resumed_config(rundir: pathlib.Path, given: dict[str, Any]) -> TrainConfig:
    """The saved config of `rundir`, with the settings a resume may give anew."""
    saved = run_folder.read_config(rundir)
    if "steps" in given and given["steps"] != saved.steps:
        session.check_raised_budget(
            rundir.name, saved, train_config.typed("steps", int, given["steps"])
        )
    return train_config.set_fields(saved, given.items(), train_config.typed)


def _all_rows(done: Run) -> Run:
    """`done` with every phase's row its folder holds, not only this call's."""
    from batchrl.training import metrics_log, results

    rows = results.phases(metrics_log.read_jsonl(run_folder.metrics(done.rundir)))
    # The file's null (no episode ended in the phase) as `train` gives it: NaN, a float.
    rows = [{key: math.nan if v is None else v for key, v in row.items()} for row in rows]
    return dataclasses.replace(done, metrics=rows)


def _train_together(
    config: str | os.PathLike | TrainConfig,
    env: Any,
    steps: int | None,
    seeds: list[int],
    logdir: str | os.PathLike | None,
    settings: dict[str, Any],
) -> list[Run]:
    """`train` of `seeds` together: one folder a seed, stamped alike."""
    # Once: its warnings said once, an env object checked once; the seed is set last.
    first, name, given = configure(config, env=env, steps=steps, seed=seeds[0], **settings)
    configs = [train_config.set_field(first, "seed", seed, train_config.typed) for seed in seeds]
    env_name = given_env.recordable(configs[0], given, logdir).env
    configs = [train_config.replace(config, env=env_name) for config in configs]
    configs, rundirs = start_together(configs, name, logdir, env=given)
    from batchrl.training import together_run  # Starts JAX's backends: after the limit.

    with compile_signals.stopping(), run_folder.removed_if_refused(rundirs):
        return together_run.train(rundirs, configs, env=given)


def configure(
    config: str | os.PathLike | TrainConfig,
    *,
    env: Any = None,
    steps: int | None = None,
    seed: int | None = None,
    **settings: Any,
) -> tuple[TrainConfig, str, Any]:
    """The run's config, its folder's config name, and the env to pass when no name says it."""
    if isinstance(config, str | os.PathLike):  # `run.rundir`, a Path, names a run folder.
        config, name = named_config(os.fspath(config))
    elif isinstance(config, TrainConfig):  # Its values read as a file's as it was made.
        name = None
    else:
        raise TypeError(
            "config is a preset's name, a run folder or YAML file, or a TrainConfig, got "
            f"{type(config).__name__}"
        )
    given, before = None, config
    if env is not None:
        config, given = given_env.with_env(config, env)
    limit, asked = given_env.step_limit(env), settings.get("max_length")
    if limit is not None and asked is not None:  # Whichever ends an episode first.
        asked = train_config.typed("max_length", int, asked)
        if asked > limit:
            logger.warning(
                "the env given ends its episodes at its own limit of %d steps, below "
                "max_length=%d: max_length=%d is taken",
                limit,
                asked,
                limit,
            )
            settings = {**settings, "max_length": limit}
    # After the env: what else it sets is the keywords' to change.
    keywords = train_config.set_fields(config, settings.items(), train_config.typed)
    train_config.say_dropped_env_kwargs(config, keywords)
    config = keywords if "env_kwargs" in settings else given_env.kwargs_kept(before, keywords)
    for key, value in (("steps", steps), ("seed", seed)):
        if value is not None:
            config = train_config.set_field(config, key, value, train_config.typed)
    if given is None and not config.jax_native:
        given = given_env.registered_in_main(config.env)
    return config, name or run_folder.safe_name(config.env), given


def named_config(text: str) -> tuple[TrainConfig, str]:
    """A preset by its name, or the config a run folder or YAML file holds; a name for its runs.

    A run folder (or its config.yaml) gives its own name part, `cheetah_clipped` of
    `20261201T120047-cheetah_clipped`, so a run started from it is named as it was;
    another YAML file (written as a config.yaml is) its stem.
    """
    path = pathlib.Path(text)
    if path.suffix == ".py":  # Its YAML parser's error named a "<document start>".
        raise ValueError(
            f"config {text!r} is a Python file: a config is a preset's name, a run folder or "
            "a YAML file (yaml.safe_dump(batchrl.configs.to_dict(config)) writes one), or "
            "train a config object from Python with batchrl.train(config)"
        )
    if text not in configs.PRESETS and not path.exists() and path.suffix in (".yaml", ".yml"):
        raise ValueError(f"config file {text!r} does not exist")
    if text in configs.PRESETS or not path.exists():
        try:
            return configs.get(text), text
        except ValueError as error:
            raise ValueError(f"{error}; or give a run folder or a config's YAML file") from None
    if path.is_dir() or path.name == run_folder.CONFIG:
        folder = path if path.is_dir() else path.parent
        config = run_folder.read_config(folder)
        return config, run_folder.safe_name(run_folder.parse(folder.resolve().name)[1])
    return run_folder.read_config_file(path), run_folder.safe_name(path.stem)


def start(
    config: TrainConfig,
    name: str,
    logdir: str | os.PathLike | None,
    timestamp: str | None = None,
    env: Any = None,
) -> tuple[TrainConfig, pathlib.Path | None]:
    """Checks the env, then makes the run folder `<logdir>/<timestamp>-<name>` (None without).

    Returns the config as the run trains it (`max_length` at most the env's own limit)
    and the folder. A refused env or space leaves no folder behind; a setting the backend
    ignores, and evaluations that cut every training episode short, are one-line warnings.
    """
    api_arguments.check_logdir(logdir)
    for line in [*backends.unused(config), config_checks.split_rollouts(config)]:
        if line:
            logger.warning("%s", line)
    limit_xla_threads(config)
    from batchrl.training import environments  # Starts JAX's backends: after the limit.

    config, spec = environments.check_run(config, env)  # Episodes as long as they run:
    for line in [*backends.episodes_cut_short(config), *config.algorithm.unread(spec)]:
        logger.warning("%s", line)
    if logdir is None:
        return config, None
    if timestamp is not None:
        api_arguments.check_new_timestamp(logdir, timestamp, name, config.seed)
    return config, run_folder.create(logdir, config, name, timestamp)


def start_together(
    configs: list[TrainConfig], name: str, logdir: str | os.PathLike | None, env: Any = None
) -> tuple[list[TrainConfig], list[pathlib.Path | None]]:
    """Checks the seeds' configs and env, then makes a folder a seed, stamped alike.

    Returns the configs as the seeds train them (`start`'s) and their folders.

    `<logdir>/<timestamp>-seed<seed>-<name>`; the timestamp gets `.1`, `.2`, ... when
    a folder of it exists (a together-run started in the same second), as a solo run's.
    A refused config or env leaves no folder behind; `overlap=on`, which a together-run's
    one program never does, is a one-line warning.
    """
    api_arguments.check_logdir(logdir)
    limit_xla_threads(configs[0])
    from batchrl.training import together_checks  # After the limit.

    together_checks.check_configs(configs)
    say_overlap_together(configs[0])
    checked, _ = start(configs[0], name, None, env=env)  # Once: the seeds share the env.
    configs = [dataclasses.replace(one, max_length=checked.max_length) for one in configs]
    if logdir is None:
        return configs, [None] * len(configs)
    stamp = datetime.datetime.now().strftime(run_folder.TIMESTAMP_FORMAT)
    for count in range(1000):
        timestamp = f"{stamp}.{count}" if count else stamp
        made: list[pathlib.Path | None] = []
        try:
            for config in configs:
                made.append(
                    run_folder.create(logdir, config, name, f"{timestamp}-seed{config.seed}")
                )
            return configs, made
        except FileExistsError:  # Another run took this timestamp: none of ours keeps it.
            for folder in made:
                shutil.rmtree(folder)
    raise FileExistsError(f"no free timestamp for {name} in {logdir} after {stamp}.999")


def say_overlap_together(config: TrainConfig) -> None:
    """A one-line warning for `overlap=on`, which seeds together never do."""
    if config.overlap == "on":
        logger.warning(
            "overlap='on' is not used when seeds train together: their one program acts "
            "and learns in turn (train each seed on its own to overlap)"
        )


def limit_xla_threads(config: TrainConfig) -> None:
    """XLA's threads kept off the cores env workers need, before JAX starts, once.

    One thread where host envs step (`xla_threads.limit`), and all of them on
    `learner_cores` cores where it is set (`xla_threads.keep_to`), which starts JAX.
    """
    if not config.jax_native:
        xla_threads.limit()
    if config.learner_cores:
        xla_threads.keep_to(config.learner_cores)

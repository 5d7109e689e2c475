"""The env a caller gives `batchrl.train` in place of its config's, and what a folder records.

A name (a Gymnasium id, `module:Class`, a JAX-native env's name), a constructor, a
Gymnasium env that `gym.make` made (as SB3's `PPO("MlpPolicy", env)` takes one), or a
JAX-native env object. A run folder records its env by name, so what no name says
(a lambda, a class of the running script, an id it registered, an env wrapped after
`gym.make`) trains in memory only, refused with a folder in one line.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.envs import registration

from batchrl.configs import TrainConfig, overrides, train_config
from batchrl.envs.host import make

logger = logging.getLogger("batchrl.training")


def recordable(config: TrainConfig, given: Any, logdir: Any) -> TrainConfig:
    """`config` with the name a run folder records its env by; a one-line ValueError if none.

    An id that a module of the caller's registers (`gym.make("module:Id")`, or the id after
    an import) is recorded as `module:Id`, which imports the module first. An env given as
    an object, a class or function the running script defines, or an id the script
    registered is refused: the train command's resume and `evaluate` run in a process that
    never runs that script, so the folder's name would find no env.
    """
    if logdir is None:
        return config
    if given is None:
        # An id a module of the caller's registered (`gym.make(id)` after importing it).
        known = not config.jax_native and config.env in gym.registry
        if known and not make.found_afresh(config.env):
            named = _registering_name(config.env)
            if named is not None:  # Its module imported first, wherever the folder is read.
                logger.info("env %r is recorded as %r, which imports its module", config.env, named)
                return train_config.replace(config, env=named)
            raise ValueError(
                f"env {config.env!r} is registered in this process only, which the train "
                "command and evaluate never run: register it in a module and give "
                f"env='module:{config.env}', or logdir=None"
            )
        return config
    if not config.jax_native and registered_in_main(config.env) is not None:
        raise ValueError(
            f"env {config.env!r} is registered by this script, which the train command and "
            "evaluate never run: register it in a module and give env='module:"
            f"{config.env}', or logdir=None"
        )
    # A partial's own module is functools': its function's says where it is defined.
    if getattr(getattr(given, "func", given), "__module__", None) == "__main__":
        # A lambda's or a nested function's name is none an import finds.
        name = config.env if config.env.isidentifier() else "name"
        raise ValueError(
            f"env {config.env!r} is defined in this script, which the train command and "
            f"evaluate never run: define it in a module and give env='module:{name}', "
            "or logdir=None"
        )
    if isinstance(given, functools.partial) and given.func is gym.make:
        made = given.args[0] if given.args else None
        if isinstance(made, registration.EnvSpec):
            own = gym.registry[made.id].max_episode_steps if made.id in gym.registry else None
            if not made.additional_wrappers and _above(made.max_episode_steps, own):
                raise ValueError(
                    f"env {config.env!r} was made with max_episode_steps="
                    f"{made.max_episode_steps}, above its id's {own}, which a run folder, "
                    "whose envs are made by id, cannot record: give a constructor that makes "
                    "it, defined at a module's top level, or logdir=None"
                )
            raise ValueError(
                f"env {config.env!r} was wrapped or changed after gym.make, which a run "
                "folder cannot record: give a constructor defined at a module's top level, "
                "or logdir=None"
            )
        what = f"gym.make({made!r}, ...)" if isinstance(made, str) else "gym.make"
        raise ValueError(
            f"env {config.env!r} is a functools.partial of {what}, which a run folder cannot "
            "record: give the id as env, its keywords as env_kwargs, or logdir=None"
        )
    inner = getattr(given, "func", None)
    if isinstance(given, functools.partial) and "<" not in getattr(inner, "__qualname__", "<"):
        name = f"{inner.__module__}:{inner.__qualname__}"
        keywords = f", env_kwargs={given.keywords!r}" * bool(given.keywords)
        keywords += " (its positional arguments among them)" * bool(given.args)
        raise ValueError(
            f"env {config.env!r} is a functools.partial, which a run folder cannot record: "
            f"give env={name!r}{keywords}, or logdir=None"
        )
    from batchrl.envs.jax import jax_env

    kind = type(given.env if isinstance(given, jax_env.TimeLimit) else given)
    if not callable(given) and "<" not in kind.__qualname__:  # An object of a module's class.
        if kind.__module__ == "batchrl.envs.jax.gymnax_env":
            raise ValueError(
                "a gymnax env object's parameters cannot be recorded in a run folder: give "
                "its gymnax id, env='Acrobot-v1' say, with backend='gymnax' and its "
                "parameters in env_kwargs, or logdir=None"
            )
        raise ValueError(
            f"env {config.env!r} is an object, whose settings a run folder cannot record: "
            f"give its class by name, env='{kind.__module__}:{kind.__qualname__}', with its "
            "constructor's keywords in env_kwargs, or logdir=None"
        )
    raise ValueError(
        f"env {config.env!r} has no importable module:qualname to record in a run folder: "
        "give a function or class defined at a module's top level, or logdir=None"
    )


def registered_in_main(name: str) -> Callable[..., gym.Env] | None:
    """A constructor of `name` when it is a Gymnasium id the running script registered.

    Worker processes need not run the script (a notebook, `python -c`), so the id would
    find no env there: its registration travels to them whole, with cloudpickle. None
    for every other name.
    """
    spec = make.carried_spec(name)  # A `__main__:Class` entry point resolved to the class.
    if spec is None or getattr(spec.entry_point, "__module__", None) != "__main__":
        return None
    return functools.partial(gym.make, spec)


def with_env(config: TrainConfig, env: Any) -> tuple[TrainConfig, Any]:
    """`config` with `env` in place of its env, and `env` itself when no name can say it."""
    if isinstance(env, str):
        return train_config.replace(config, env=env), None
    from batchrl.envs.jax import env_check, gymnax_env, jax_env

    if gymnax_env.is_gymnax(env):  # A gymnax `Environment` of the user's: its defaults.
        env = gymnax_env.wrap(env)
    if not isinstance(env, type) and isinstance(env, jax_env.Env):
        backend = config.backend if config.jax_native else "jax"
        label = type(getattr(env, "env", env)).__name__  # Within its time limit's wrapper.
        env_check.check(env)  # Before any folder: what its reset and step return.
        # Its own time limit, as a Gymnasium env's step limit: the preset's cut it silently.
        changes = {"backend": backend, "env": label, "max_length": env.max_length}
        return train_config.replace(config, **changes), env
    if isinstance(env, gym.Env):
        return _with_instance(config, env)
    if isinstance(env, gym.vector.VectorEnv):  # Said to lack a JAX-native env's members.
        raise TypeError(
            f"env is a vector env, {type(env).__name__}: a run makes its own batch of envs, so "
            f"give one env's id, constructor or gym.make env, with num_envs={env.num_envs}"
        )
    if not isinstance(env, type) and hasattr(env, "reset") and hasattr(env, "step"):
        lacks = [name for name in ("env_spec", "max_length") if not hasattr(env, name)]
        raise TypeError(
            f"env {type(env).__name__} has reset and step but no {' or '.join(lacks)}: a "
            f"JAX-native env has env_spec, max_length, reset and step (jax_env.Env)"
        )
    if not callable(env):
        raise TypeError(
            "env is a name, a constructor, a Gymnasium env or a JAX-native env, "
            f"got {type(env).__name__}"
        )
    name = _importable_name(env)
    if name is not None:
        return train_config.replace(config, env=name), None
    return train_config.replace(config, env=_label(env)), env


def _label(constructor: Any) -> str:
    """A constructor's name in messages: a partial's function's, or the id it makes."""
    if isinstance(constructor, functools.partial):
        made = constructor.args[0] if constructor.args else None
        if constructor.func is gym.make and isinstance(made, str | registration.EnvSpec):
            return made if isinstance(made, str) else made.id
        return _label(constructor.func)
    return getattr(constructor, "__qualname__", type(constructor).__name__)


def _with_instance(config: TrainConfig, env: gym.Env) -> tuple[TrainConfig, Any]:
    """`config` with the env `gym.make` made `env` as, for one copy of it a run's env.

    As `model = PPO("MlpPolicy", env)` takes one: an env that its id and keywords make
    again is recorded by them, its step limit as `max_length`; one wrapped after
    `gym.make` is made again from its spec (`gym.make(env.spec)`), which no run folder
    records.
    """
    spec = env.spec
    backend = "processes" if config.jax_native else config.backend
    if spec is None:
        raise TypeError(
            f"env is a {type(env.unwrapped).__name__} that gym.make did not make, so it cannot "
            f"be made again for each of the run's envs: give its constructor or id"
        )
    unknown = [w.name for w in spec.additional_wrappers if w.kwargs is None]
    if unknown:
        raise TypeError(
            f"env's wrapper {unknown[0]} does not record its arguments, so gym.make cannot "
            "make the env again for each of the run's envs: give a constructor"
        )
    registered = gym.registry.get(spec.id)
    changes = {"backend": backend, "env": spec.id, "env_kwargs": {}}
    own = None if registered is None else registered.max_episode_steps
    if spec.max_episode_steps is not None and spec.max_episode_steps != own:
        changes["max_length"] = spec.max_episode_steps  # The run's step limit.
    same = ("order_enforce", "disable_env_checker", "entry_point")
    if (
        registered is None
        or spec.additional_wrappers
        or any(getattr(spec, field) != getattr(registered, field) for field in same)
        or _above(spec.max_episode_steps, own)  # An id's envs end at its own limit.
    ):
        return train_config.replace(config, **changes), functools.partial(gym.make, spec)
    missing = object()
    kwargs = {k: v for k, v in spec.kwargs.items() if registered.kwargs.get(k, missing) != v}
    if backend == "ale":  # Its env_kwargs hold ale-py's options too (reward clipping): kept.
        # Where the env sets one of them, as the default it was registered with, the env's.
        taken = {k: spec.kwargs[k] for k in config.env_kwargs if k in spec.kwargs}
        for key, value in taken.items():
            if value != config.env_kwargs[key]:
                logger.warning(
                    "the env given has %s=%r, the preset %r: the env's is taken",
                    key,
                    value,
                    config.env_kwargs[key],
                )
        kwargs = {**config.env_kwargs, **taken, **kwargs}
        logger.warning(
            "the env given is played as the preset's games are, its frames preprocessed "
            "(grayscale, resized, stacked) as theirs: the policy acts on those, not on this "
            "env's own frames"
        )
    return train_config.replace(config, **{**changes, "env_kwargs": kwargs}), None


def step_limit(env: Any) -> int | None:
    """The step limit a given env object sets the run, which the run's envs do not keep.

    A JAX-native env's `max_length`; a made Gymnasium env's `max_episode_steps` where
    gym.make was given one other than its id's, as Gymnasium's own TimeLimit takes it
    (one above the id's makes the run's envs from the env's spec, not its id).
    """
    if isinstance(env, gym.Env) and env.spec is not None:
        spec, registered = env.spec, gym.registry.get(env.spec.id)
        own = None if registered is None else registered.max_episode_steps
        return None if spec.max_episode_steps in (None, own) else spec.max_episode_steps
    limit = getattr(env, "max_length", None)
    return limit if isinstance(limit, int) and hasattr(env, "env_spec") else None


def _above(limit: int | None, own: int | None) -> bool:
    """Whether step limit `limit`, given to gym.make, lifts the id's own limit `own`."""
    return limit is not None and own is not None and limit > own


def _registering_name(env_id: str) -> str | None:
    """`module:env_id` where a module this process imported registers the id; else None.

    The module of the id's entry point is asked first, then each other imported module
    whose source names the id and calls a `register` (the env's class in another file).
    """
    entry_point = gym.registry[env_id].entry_point
    module = entry_point.partition(":")[0] if isinstance(entry_point, str) else ""
    for name in dict.fromkeys([module, *_naming_modules(env_id)]):
        if name and name != "__main__" and make.found_afresh(f"{name}:{env_id}"):
            return f"{name}:{env_id}"
    return None


def _naming_modules(env_id: str) -> list[str]:
    """Imported modules, but Python's and installed packages', naming `env_id` and `register(`."""
    installed = tuple({sysconfig.get_path(key) for key in ("stdlib", "purelib", "platlib")})
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not path.endswith(".py") or path.startswith(installed):
            continue
        try:
            source = pathlib.Path(path).read_text(errors="replace")
        except OSError:
            continue
        if env_id in source and "register(" in source:
            found.append(name)
    return found


def _importable_name(constructor: Any) -> str | None:
    """`module:qualname` of a top-level function or class that importing finds again."""
    module = getattr(constructor, "__module__", None)
    qualname = getattr(constructor, "__qualname__", "")
    if not module or module == "__main__" or not qualname.isidentifier():
        return None
    try:
        found = make.resolve(f"{module}:{qualname}")
    except ValueError:
        return None
    return f"{module}:{qualname}" if found is constructor else None


def overridden(config: TrainConfig, assignments: list[str]) -> TrainConfig:
    """`config` with `--set`'s `key=value`s, as `configs.parse_overrides`, its env's kwargs kept."""
    changed = overrides.parse_overrides(config, assignments)
    keys = {assignment.partition("=")[0].strip() for assignment in assignments}
    given = keys & {"env_kwargs", "algorithm.env_kwargs"}
    return changed if given else kwargs_kept(config, changed)


def kwargs_kept(before: TrainConfig, after: TrainConfig) -> TrainConfig:
    """`after`, `before` given another env, with only the env_kwargs the new env takes.

    The config's env_kwargs are its env's keywords: `minigrid_doorkey`'s `env_id` went on
    to a user's own env, which failed for a keyword the user never set. Those the new env's
    constructor names are kept (`humanoid_clipped`'s on HumanoidStandup-v5), the
    others left out with a warning; a JAX-native env's parameters are its own. An Atari
    game's (`backend=ale`) are ale-py's for every game: kept. Unread, they stay, and the
    env check says why.
    """
    kwargs = after.env_kwargs
    if after.env == before.env or after.backend == "ale" or not kwargs:
        return after
    if kwargs != before.env_kwargs:  # Set by the user, or an env instance's own.
        return after
    named = frozenset() if after.jax_native else make.named_keywords(after.env)
    if named is None:
        return after
    dropped = {key: value for key, value in kwargs.items() if key not in named}
    if dropped:
        listed = ", ".join(f"{key}: {value!r}" for key, value in dropped.items())
        logger.warning(
            "env=%r takes no {%s}, env_kwargs of the config's env %r: left out (set "
            "env_kwargs for its own)",
            after.env,
            listed,
            before.env,
        )
    kept = {key: value for key, value in kwargs.items() if key not in dropped}
    return train_config.replace(after, env_kwargs=kept)

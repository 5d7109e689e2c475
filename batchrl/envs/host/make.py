"""Make: a picklable constructor of one Gymnasium env from a name, for worker processes.

A name is a Gymnasium id ("HalfCheetah-v5"), a `module:Class` entry point, or a
`module:EnvId` whose module registers that id when imported (as Gymnasium reads
`gymnasium_robotics:PointMaze_UMaze-v3`); `Make` also takes a constructor in place of
a name (any callable: workers receive it with cloudpickle). `kwargs` go to the env's
constructor, as `gym.make(name, **kwargs)` passes them, and `wrappers` wrap the env
after, as `gym.make_vec`'s do. With `max_length`, episodes end at the env's own time
limit or at `max_length`, whichever comes first, always as truncation.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import functools
import importlib
import inspect
import pathlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from batchrl import extras
from batchrl.envs.host import minigrid_env, wrappers

# gym.make's own keywords, beside those it passes to an id's env.
_MAKE_KEYWORDS = frozenset(inspect.signature(gym.make).parameters) - {"id", "kwargs"}
# Env packages of batchrl's extras (pyproject.toml): a missing one is named with its extra.
_EXTRAS = {"gymnasium_robotics": "robotics", "minigrid": "minigrid", "ale_py": "atari"}
# Namespaces of ids a package registers when imported, as Gymnasium 1 loads no plugins.
_NAMESPACES = {"ALE": "ale_py"}


def register_namespace(name: str) -> None:
    """Imports the package that registers id `name`'s namespace (`ALE/...`: ale-py), if any.

    A worker, or a run on worker processes, that never imported ale-py said "Namespace ALE
    not found. Have you installed the proper package?" with ale-py installed.
    """
    namespace, slash, _ = name.partition("/")
    module = _NAMESPACES.get(namespace) if slash else None
    if module is None or any(key.startswith(f"{namespace}/") for key in gym.registry):
        return
    with contextlib.suppress(ImportError):  # Not installed: Gymnasium's words say so.
        gym.register_envs(importlib.import_module(module))


def gymnasiums_own(name: str) -> bool:
    """Whether id `name` is one Gymnasium registers, with a class of its: every process has it."""
    spec = gym.registry.get(name)
    entry_point = spec.entry_point if spec is not None else None
    gymnasiums = isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.")
    return gymnasiums and name in gymnasium_ids()


@functools.cache
def gymnasium_ids() -> frozenset[str]:
    """The ids Gymnasium registers as it is imported, read from its source.

    Not its registry's, nor those whose entry point is a class of Gymnasium's: the
    caller's ids are there too, a variant of Gymnasium's Pendulum under an id of its own,
    say, which no other process knows. An id Gymnasium's source does not write out is
    left out, and asked of a fresh interpreter.
    """
    tree = ast.parse(pathlib.Path(gym.envs.__file__).read_text())
    keywords = (k for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords)
    return frozenset(
        k.value.value for k in keywords if k.arg == "id" and isinstance(k.value, ast.Constant)
    )


def found_afresh(name: str) -> bool:
    """Whether a process that imported none of the caller's modules finds Gymnasium id `name`.

    Gymnasium's own ids and those of the namespaces it imports (`ALE/`) are found; an id
    that a module of the caller's registered is found by its train command's resume and
    `evaluate` only where that module registers it too, asked of a fresh interpreter.
    """
    if gymnasiums_own(name):
        return True
    if name.partition("/")[0] in _NAMESPACES and "/" in name:
        return True
    # Exit status 3: the id is unknown there; anything else (another failure) is no
    # evidence either way, and refuses nothing.
    code = (
        "import sys\nfrom batchrl.envs.host import make\n"
        "try:\n    make.check_name(sys.argv[1])\nexcept ValueError:\n    sys.exit(3)"
    )
    try:
        fresh = subprocess.run([sys.executable, "-c", code, name], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return fresh.returncode != 3


def check_name(
    name: str, kwargs: dict[str, Any] | None = None, *, make_keywords: bool = False
) -> None:
    """Raises a one-line ValueError for an unknown env or keyword, before any worker starts.

    `make_keywords`: an id may take gym.make's own keywords (`max_episode_steps`, ...), as a
    BatchEnv builder's do; training sets those itself.
    """
    if not name.strip():  # Gymnasium's "Malformed environment ID" led to a module hint.
        raise ValueError(
            f"env {name!r} names no env: give a Gymnasium id such as 'Pendulum-v1', or "
            "'module:Class'"
        )
    if ":" in name:
        module_name, _, class_name = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise _cannot_import(module_name, name, error) from None
        if hasattr(module, class_name):
            _check_kwargs(name, getattr(module, class_name), kwargs or {})
            return
        if class_name not in gym.registry:
            raise ValueError(
                f"module {module_name!r} has no {class_name!r} and registers no such env "
                f"for env {name!r}{_did_you_mean(class_name, module)}"
            )
        name = class_name
    register_namespace(name)
    try:
        spec = gym.spec(name)
    except gym.error.Error as error:
        # An id a module of the user's registers is unknown to a process that never
        # imported that module: a resume, `evaluate` or `visualize` of its run folder.
        # Gymnasium's own words suffice for an old or missing version of a known env.
        known = isinstance(error, gym.error.DeprecatedEnv | gym.error.VersionNotFound)
        hint = f" (an id your module registers: give env='<module>:{name}', which imports it first)"
        hint = minigrid_env.hint(name) or hint
        raise ValueError(f"unknown env {name!r}: {error}{'' if known else hint}") from None
    also = sorted(_MAKE_KEYWORDS) if make_keywords else []
    kwargs = {key: value for key, value in (kwargs or {}).items() if key not in also}
    if kwargs:
        creator = spec.entry_point
        constructor = creator if callable(creator) else load_env_creator(creator)
        _check_kwargs(name, constructor, kwargs, also)


def _did_you_mean(name: str, module: Any) -> str:
    """`: did you mean 'X'?` for the module's public name or registered id closest to `name`."""
    public = [key for key in vars(module) if not key.startswith("_")]
    close = difflib.get_close_matches(name, [*public, *gym.registry], n=1, cutoff=0.8)
    return f": did you mean {module.__name__ + ':' + close[0]!r}?" if close else ""


def _cannot_import(module_name: str, name: str, error: ImportError) -> ValueError:
    """The one line for an env's module that does not import; an extra's names the extra."""
    message = f"cannot import {module_name!r} for env {name!r}: {error}"
    extra = _EXTRAS.get((error.name or "").partition(".")[0])
    if extra is not None:
        message += f": {extras.pip_install(extra)}"
    return ValueError(message)


def resolve(name: str) -> Any:
    """The object `module:qualname` names; a one-line ValueError when there is none."""
    module_name, _, qualname = name.partition(":")
    try:
        found = importlib.import_module(module_name)
    except ImportError as error:
        raise _cannot_import(module_name, name, error) from None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is None:
        raise ValueError(f"module {module_name!r} has no {qualname!r} for env {name!r}")
    return found


def named_keywords(name: str) -> frozenset[str] | None:
    """The keywords env `name`'s constructor names (not its `**kwargs`); None if unread.

    `name` as `check_name` takes it; an unknown or unimportable env, which `check_name`
    tells of, or a constructor without a signature, is None.
    """
    try:
        if ":" in name:
            module_name, _, attribute = name.partition(":")
            module = importlib.import_module(module_name)
            if hasattr(module, attribute):
                constructor = getattr(module, attribute)
            else:
                name = attribute
        if ":" not in name:
            register_namespace(name)
            creator = gym.spec(name).entry_point
            constructor = creator if callable(creator) else load_env_creator(creator)
        parameters = inspect.signature(constructor).parameters.values()
    except Exception:
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in named)


def _check_kwargs(
    name: str, constructor: Any, kwargs: dict[str, Any], also: Sequence[str] = ()
) -> None:
    """Raises a one-line ValueError naming each keyword `constructor` does not take.

    `also`: keywords taken beside the constructor's (gym.make's own), named in the error
    too, so that a misspelt `max_episode_step` points at the keyword meant.
    """
    if not kwargs:
        return
    if "max_episode_steps" in kwargs:  # gym.make's, which batchrl sets from max_length.
        raise ValueError(
            f"env {name!r} takes no keyword 'max_episode_steps' in env_kwargs: its episodes' "
            "step limit is the setting max_length"
        )
    try:
        parameters = inspect.signature(constructor).parameters.values()
    except (TypeError, ValueError):  # A builtin without a signature: let the env judge.
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    known = [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        takes = f"it takes {', '.join(known) or 'none'}"
        if also:
            takes += f", and gym.make's {', '.join(also)}"
        close = difflib.get_close_matches(unknown[0], [*known, *also], n=1, cutoff=0.8)
        meant = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"env {name!r} takes no keyword {', '.join(map(repr, unknown))} in env_kwargs{meant}: "
            f"{takes}"
        )


class Make:
    """Builds the env `name` with `kwargs`, an optional step limit, render mode and action repeat.

    The training path builds every Gymnasium env here, its wrappers chosen by the config
    (`wrappers.apply`: the time limit counts the env's own steps, then actions repeat).
    """

    def __init__(
        self,
        name: str | Callable[..., gym.Env],
        max_length: int | None = None,
        render_mode: str | None = None,
        action_repeat: int = 1,
        kwargs: dict[str, Any] | None = None,
        wrappers: tuple[Callable[[gym.Env], gym.Env], ...] = (),
    ):
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be at least 1, got {action_repeat}")
        self.name = name
        self.max_length = max_length
        self.render_mode = render_mode
        self.action_repeat = action_repeat
        self.kwargs = dict(kwargs or {})
        self.wrappers = tuple(wrappers)  # `gym.make_vec`'s: each env wrapped after gym.make.
        # The id as this process registered it: a worker that never ran the registering
        # code (an id registered under `if __name__ == "__main__":`, in a notebook, by a
        # module imported there) registers it from here, as a forked AsyncVectorEnv's has it.
        self.spec = carried_spec(name) if isinstance(name, str) else None

    def __call__(self) -> gym.Env:
        env = self._limited()
        for wrapper in self.wrappers:
            env = wrapper(env)
        return wrappers.apply(env, action_repeat=self.action_repeat)

    def _limited(self) -> gym.Env:
        kwargs = dict(self.kwargs)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        name = self.name
        if callable(name):
            return wrappers.apply(_built(name, kwargs, name), duration=self.max_length)
        if ":" in name:
            module_name, _, attribute = name.partition(":")
            module = importlib.import_module(module_name)
            if hasattr(module, attribute):
                maker = getattr(module, attribute)
                return wrappers.apply(_built(maker, kwargs, name), duration=self.max_length)
        register_namespace(name)
        if self.spec is not None and name not in gym.registry:  # Made from its spec, unregistered.
            own = self.spec.max_episode_steps
            if self.max_length is not None and own is not None:
                kwargs["max_episode_steps"] = min(own, self.max_length)
            elif self.max_length is not None:
                kwargs["max_episode_steps"] = self.max_length
            return gym.make(self.spec, **kwargs)
        if self.max_length is None:
            return gym.make(name, **kwargs)
        limit = time_limit(name, self.max_length)
        return gym.make(name, max_episode_steps=limit, **kwargs)


def carried_spec(name: str) -> EnvSpec | None:
    """Id `name`'s spec as registered here, for a process that may lack it; None if any has it.

    Gymnasium's own ids and those of the namespaces batchrl imports are found anywhere. A
    `__main__:Class` entry point is resolved to the class, which reaches a worker by value.
    """
    spec = None if ":" in name else gym.registry.get(name)
    if spec is None or name.partition("/")[0] in _NAMESPACES or gymnasiums_own(name):
        return None
    entry_point = spec.entry_point
    if isinstance(entry_point, str) and entry_point.partition(":")[0] == "__main__":
        return dataclasses.replace(spec, entry_point=load_env_creator(entry_point))
    return spec


class NotAnEnvError(TypeError):
    """What an env's name or constructor gives is no env (or makes none)."""


def _built(maker: Any, kwargs: dict, name: Any) -> gym.Env:
    """The env `maker` builds; a one-line NotAnEnvError where it cannot build one."""
    shown = repr(name if isinstance(name, str) else getattr(name, "__name__", repr(name)))
    if not callable(maker):
        raise NotAnEnvError(
            f"env {shown} is a {type(maker).__name__}, not an env class or a function "
            "that returns an env"
        )
    return checked(maker(**kwargs), shown)


def checked(env: Any, shown: str) -> gym.Env:
    """`env`, which the constructor `shown` names built; a one-line NotAnEnvError if no env."""
    if not isinstance(env, gym.Env):
        said = f"env {shown} returned a {type(env).__name__}, not a gymnasium.Env"
        if hasattr(env, "env_spec") and hasattr(env, "step"):  # `jax_env.Env`'s members.
            said += ": a JAX-native env trains with backend=jax"
        elif hasattr(env, "step_env"):  # gymnax's `Environment`.
            said += ": gymnax's envs train by their id with backend=gymnax"
        raise NotAnEnvError(said)
    lacks = [name for name in ("observation_space", "action_space") if not hasattr(env, name)]
    if lacks:  # Read first where the spaces are checked: an AttributeError's traceback.
        raise NotAnEnvError(
            f"env {shown} has no {' or '.join(lacks)}: a Gymnasium env sets both in its __init__"
        )
    return env


def time_limit(env_id: str, max_length: int) -> int:
    """The time limit of a Gymnasium id (or `module:EnvId`) capped at `max_length`."""
    if ":" in env_id:
        module_name, _, env_id = env_id.partition(":")
        importlib.import_module(module_name)
    registered = gym.spec(env_id).max_episode_steps
    return max_length if registered is None else min(registered, max_length)

"""A run's programs built once per process, for the runs that would build the same ones.

A run's programs (its train phase, evaluation and agent init) follow from its config,
but for its seed, and from its envs. JAX-native envs are values: two runs of one config
on equal JAX-native envs, in one process, would trace, lower and compile the same
programs (the interrupted run resumed in the same notebook, a solo run beside a seed
of a together-run, the same preset trained again), so the second takes the first's. An
env object changed in place since is another env (its pickle differs).
Host envs belong to their run's processes and are never shared. A few runs' programs
are kept, the last used; `clear` drops them (a test that counts compilations does).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import pickle
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import jax

from batchrl import algorithm as algorithm_lib
from batchrl.configs import train_config
from batchrl.envs.jax import jax_env

KEPT = 4  # Runs whose programs are kept.
_kept: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
# Programs handed to a run after the one that built them, by id (the object itself checked).
_again: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def key(
    config: train_config.TrainConfig, envs: tuple[Any, ...], sizes: tuple[Any, ...]
) -> Hashable | None:
    """What a run's programs follow from; None where they cannot be shared.

    The key is `config` but its seed, the algorithm record it names (`algorithm.of`, as
    it is now), its `envs` (and their contents, `_contents`) and `sizes`. None where an
    env is not a JAX-native value: host envs, or a JAX-native env with no hash or pickle.
    """
    if not all(isinstance(env, jax_env.Compiled) for env in envs):
        return None
    unseeded = train_config.to_dict(dataclasses.replace(config, seed=0))
    algorithm = algorithm_lib.of(config.algorithm)
    found = (json.dumps(unseeded, sort_keys=True, default=repr), algorithm, envs, sizes)
    try:
        hash(found)
    except TypeError:
        return None
    contents = _contents(envs)
    return None if contents is None else (*found, contents)


def _contents(values: tuple[Any, ...]) -> bytes | None:
    """`values` as pickle writes them now; None where it cannot.

    A plain object is equal to itself and hashes by its identity: an env changed in place
    (`env.goal = 2`, in a notebook) would key the programs traced before the change.
    Its pickle holds its attributes' values as they are now.
    """
    try:
        return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # A lock, a lambda: nothing pickle can write.
        return None


def programs(found: Hashable | None, build: Callable[[], Any]) -> Any:
    """The programs kept for key `found`, else `build()`'s, kept where `found` is a key."""
    if found is None:
        return build()
    if found in _kept:
        _kept.move_to_end(found)
        _again[id(_kept[found])] = _kept[found]
        return _kept[found]
    built = _kept[found] = build()
    while len(_kept) > KEPT:
        _kept.popitem(last=False)
    return built


def taken_again(programs: Any) -> bool:
    """Whether `programs` were handed to this run after an earlier run's, which built them."""
    return _again.get(id(programs)) is programs


def jit(function: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """`jax.jit` of `function` with `args` (envs, say) bound, compiled once for equal `args`.

    The same jitted function is kept for equal `args` where they hash and pickle alike.
    """
    contents = _contents(args)
    if contents is not None:
        with contextlib.suppress(TypeError):  # An argument with no hash.
            return _jitted(function, args, contents)
    return jax.jit(functools.partial(function, *args))


@functools.lru_cache(maxsize=4 * KEPT)
def _jitted(function: Callable[..., Any], args: tuple[Any, ...], contents: bytes) -> Callable:
    return jax.jit(functools.partial(function, *args))


def clear() -> None:
    """Drops every run's kept programs: the next run of any config builds its own."""
    _kept.clear()
    _jitted.cache_clear()

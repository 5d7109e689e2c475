"""Backends: where a run's envs run, and the two old settings that `backend` replaced.

`env_kind` ("workers", "jax", "gymnax") and `env_backend` (the Gymnasium backends) crossed:
`env_kind=workers` with `env_backend=mujoco` ran no worker. Users' scripts and run folders
written before still name them; `backend_of` says which backend they mean.
"""

from __future__ import annotations

# Where a run's envs run: Gymnasium envs in worker processes, on a Ray cluster, MuJoCo
# tasks in C threads, Atari games in C++ threads; JAX-native envs of our own or gymnax's.
BACKENDS = ("processes", "ray", "mujoco", "ale", "jax", "gymnax")
JAX_NATIVE = ("jax", "gymnax")  # The backends whose envs are XLA code.
# The backends that step their envs in threads of this process, built by name.
IN_PROCESS = ("mujoco", "ale")
# Settings that `backend` replaced: each old value's backend ("workers" keeps a Gymnasium
# backend as it was). Run folders written with them read back as `backend`.
DEPRECATED = ("env_kind", "env_backend")


def backend_of(name: str, value: str, backend: str = "processes") -> str:
    """The `backend` that deprecated setting `name`'s `value` means, on a run of `backend`.

    `env_kind` "jax" and "gymnax" are backends of their own, and "workers" any Gymnasium
    one; `env_backend` named the Gymnasium backends, and left JAX-native runs as they were.
    """
    gymnasium = tuple(b for b in BACKENDS if b not in JAX_NATIVE)
    if name == "env_kind" and value in JAX_NATIVE:
        return value
    if name == "env_kind" and value == "workers":
        return backend if backend in gymnasium else "processes"
    if name == "env_backend" and value in gymnasium:
        return backend if value == "processes" and backend in JAX_NATIVE else value
    allowed = (*JAX_NATIVE, "workers") if name == "env_kind" else gymnasium
    raise ValueError(
        f"unknown {name} {value!r}: use one of {allowed}, or backend, which replaces it"
    )

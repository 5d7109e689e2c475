"""Placement: the device a run acts on and the device it learns on.

The learner (its updates, optimiser and the rollout it trains on) runs on the config's
`device`; acting (the policy's forward pass and the env step, one compiled program) runs
where it is fastest for the backend, unless `acting_device` names a device:

- JAX-native envs act on the learner's device, so a phase is one program there.
- Envs the host steps (worker processes, the MuJoCo batch, Ray) act on the CPU, where
  the bridge reads XLA's buffers in place; on an accelerator it would copy every
  observation and action across at every step (`bridge.in_graph`).
- Atari games act on the learner's device where ale-py has an XLA target for its
  platform, else on the CPU.

When the two devices differ, a phase moves each rollout to the learner once and the
acting parameters back once (`training.phase`); the run's state keeps its agent on the
learner's device and its simulations on the acting device (`place`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from batchrl.configs import TrainConfig


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a run acts and where it learns."""

    acting: jax.Device
    learner: jax.Device
    # Devices a data-parallel learner splits its minibatches over: `learner` and the next
    # local ones (`ppo.sgd.data_parallel`, `check_data_parallel`).
    learner_devices: int = 1

    @property
    def split(self) -> bool:
        """Acting and learning run on different devices: a phase is several programs."""
        return self.acting != self.learner

    def to_acting(self, tree: Any) -> Any:
        """`tree`'s arrays on the acting device (committed there)."""
        return jax.device_put(tree, self.acting)

    def to_learner(self, tree: Any) -> Any:
        """`tree`'s arrays on the learner's device (committed there)."""
        return jax.device_put(tree, self.learner)

    def describe(self) -> str:
        """One line for the terminal: `acting on cpu:0, learning on gpu:0` (`gpu:0 + gpu:1`).

        A data-parallel learner's program acts too, its state copied on each of its devices.
        """
        copied = self.learner_devices > 1 and not self.split
        acting = f"{self.learner_names()} (copied)" if copied else name_of(self.acting)
        return f"acting on {acting}, learning on {self.learner_names()}"

    def learner_names(self) -> str:
        """The learner's devices as the settings name them: `gpu:0`, or `gpu:0 + gpu:1`."""
        if self.learner_devices == 1:
            return name_of(self.learner)
        first = jax.local_devices().index(self.learner)
        devices = jax.local_devices()[first : first + self.learner_devices]
        return " + ".join(name_of(d) for d in devices)


def name_of(device: jax.Device) -> str:
    """`device` as the settings name it: `cpu:0`, `gpu:1`."""
    return f"{device.platform}:{device.id - _first_id(device.platform)}"


def device(name: str, setting: str = "device") -> jax.Device:
    """The device `name` means ("auto", "cpu", "gpu:1"); one-line errors for one JAX lacks.

    "auto" is JAX's default device. `setting` names the config field in errors.
    """
    if name == "auto":
        return jax.devices()[0]
    platform, _, index = name.partition(":")
    platform = "gpu" if platform == "cuda" else platform
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        found = sorted({d.platform for d in jax.devices()} | {"cpu"})
        raise ValueError(
            f"{setting}={name!r}, but JAX finds no {platform} here (it has {', '.join(found)}): "
            f"install JAX for it (README, Train and test) or set {setting}=cpu (a resume may too)"
        ) from None
    position = int(index or 0)
    if position >= len(devices):
        raise ValueError(
            f"{setting}={name!r}, but JAX has {len(devices)} {platform} device(s): "
            f"use {platform}:0 to {platform}:{len(devices) - 1} (a resume may set it anew)"
        )
    return devices[position]


def learner_device(config: TrainConfig) -> jax.Device:
    """The device `config` learns on."""
    return device(config.device)


def host_acting_device(
    config: TrainConfig, native_platforms: tuple[str, ...] = ("cpu",)
) -> jax.Device:
    """The device an env the host steps acts on in a run of `config`.

    The env's calls run natively on `native_platforms` (the bridge reads buffers in place
    on the CPU); "auto" is the learner's device where that is one of them, else the CPU.
    """
    if config.acting_device != "auto":
        return device(config.acting_device, "acting_device")
    learner = learner_device(config)
    return learner if learner.platform in native_platforms else jax.devices("cpu")[0]


def resolve(config: TrainConfig, env: Any) -> Placement:
    """Where a run of `config` on `env` (a batched env `environments.build` made) acts and learns.

    An env the host steps acts on the device it was built for (its `device`); a JAX-native
    one on `acting_device`, "auto" being the learner's.
    """
    learner = learner_device(config)
    if env.calls_host:
        acting = env.device
    elif config.acting_device == "auto":
        acting = learner
    else:
        acting = device(config.acting_device, "acting_device")
    return Placement(acting, learner, config.algorithm.learner_devices)


def check_data_parallel(config: TrainConfig, where: Placement) -> None:
    """A one-line ValueError where `config`'s data-parallel learner cannot run `where`.

    `learner_devices` > 1 splits each minibatch over JAX's first local devices
    (`ppo.sgd.data_parallel`), and a program stepping host envs over them makes its
    calls on the first: acting and learning must both be on that first device.
    """
    devices = config.algorithm.learner_devices
    if devices == 1:
        return
    available = jax.local_device_count()  # Before the run's first line, not at its compile.
    if devices > available:
        raise ValueError(
            f"learner_devices={devices}, but this process has {available} local device(s) "
            f"(on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N; a resume "
            f"may set learner_devices anew)"
        )
    first = jax.local_devices()[0]
    if where.learner != first:
        used = ", ".join(name_of(d) for d in jax.local_devices()[:devices])
        raise ValueError(
            f"learner_devices={devices} learns on JAX's first devices ({used}), "
            f"got device={config.device!r}: set device=auto or {name_of(first)}"
        )
    if where.split:
        raise ValueError(
            f"learner_devices={devices} needs acting on the learner's devices, "
            f"got {where.describe()}: set acting_device={config.device}"
        )


def _first_id(platform: str) -> int:
    return min(d.id for d in jax.devices(platform))

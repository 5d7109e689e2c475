"""Whether N seeds fit the learner's memory: their storage first, then their compiled phase.

The storage (episode memory or rollout buffer) is measured from its shapes before any
seed's state is made, so a sweep far too big is refused at once. A phase holds more:
its outputs beside its arguments (a new state for the old) and its temporaries
(advantages, shuffled minibatches). Nine `pendulum_jax` seeds at update_every=3000 keep
177 MiB of storage, and their compiled phase holds 421 MiB at its peak. XLA's memory
analysis gives that figure once the phase is compiled, before it runs; the compile
costs nothing more, since the first call finds it in JAX's cache. A solo run's phase is
checked as one seed's (`check_solo`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from batchrl import simulate
from batchrl.training import device_memory, loop, terminal


def one_storage(states: list[loop.RunState]) -> list[loop.RunState]:
    """The seeds' fresh states, the first's storage for all: one array, not one a seed.

    Storage as built is zeros alike. Every seed's own beside their stacked copy held
    twice the storage `check_storage` counts: 60 `pendulum_jax` seeds, whose 1.2 GiB
    passed it with 3 GiB free, were killed by the system without a word.
    """
    storage = states[0].agent.storage
    return [state.replace(agent=state.agent.replace(storage=storage)) for state in states]


def check_storage(programs: loop.Programs, seeds: int) -> None:
    """A one-line MemoryError when N seeds' storage exceeds the learner's free memory.

    Names the storage's size and the most seeds that fit.
    """
    device = programs.where.learner
    free = device_memory.available(device)
    total = seeds * programs.storage_bytes
    if free is None or total <= free:
        return
    fits = free // max(programs.storage_bytes, 1)
    raise MemoryError(
        f"the storage of {terminal.counted(seeds, 'seed')} takes {device_memory.human(total)}, "
        f"more than the {device_memory.human(free)} free on {device.platform}: "
        f"at most {_fit(fits)}"
    )


@dataclasses.dataclass(frozen=True)
class Peak:
    """Bytes a compiled program holds at its peak, as XLA assigned its buffers."""

    arguments: int
    outputs: int  # Less those that reuse an argument's buffer.
    temporaries: int


def peak(program: Any, *args: Any) -> Peak | None:
    """The peak of `program` (a `jax.jit`) on `args`, compiling it; None where XLA does not say."""
    stats = program.lower(*args).compile().memory_analysis()
    if stats is None:
        return None
    outputs = stats.output_size_in_bytes - stats.alias_size_in_bytes
    return Peak(stats.argument_size_in_bytes, outputs, stats.temp_size_in_bytes)


def check_phase(peak: Peak, seeds: int, held: int, device: jax.Device) -> None:
    """A one-line MemoryError when a phase of `seeds` seeds needs more than `device` has free.

    `held`: bytes the seeds' states hold already, out of the free memory by now. What
    the phase adds (its outputs and temporaries) must fit what is free. The most seeds
    that fit is a lower bound: per seed, its share of the states and outputs; its
    temporaries as many as all seeds' (no more with fewer seeds).
    """
    free = device_memory.available(device)
    needs = peak.outputs + peak.temporaries
    if free is None or needs <= free:
        return
    per_seed = (held + peak.outputs) / seeds
    fits = max(int((free + held - peak.temporaries) // per_seed), 0)
    lower = (
        "lower num_envs, policy_layers, value_layers, max_length, update_every or steps_per_update"
    )
    most = f"at most {_fit(fits)}" if fits else f"not one seed fits: {lower}"
    whose = f"a train phase of {terminal.counted(seeds, 'seed')}", "their states'"
    if seeds == 1:
        whose, most = ("the train phase", "the run's state's"), lower
    raise MemoryError(
        f"{whose[0]} needs {device_memory.human(needs)} beyond {whose[1]} "
        f"{device_memory.human(held)}, more than the {device_memory.human(free)} free on "
        f"{device.platform}: {most}"
    )


def check_solo(programs: loop.Programs, state: loop.RunState) -> None:
    """`check_phase` of one run's phase, compiling it, where the phase is one program.

    A phase split over two devices, or overlapped, is not read: its programs are many.
    On the CPU the phase's temporaries were checked nowhere, and a phase past the free
    memory was killed by the system without a word: `breakout` on 64 envs keeps 221 MiB
    of storage, and its phase holds 6.3 GiB of temporaries.
    """
    program = getattr(programs.train, "program", None)
    if program is None:
        return
    train = simulate.clear_summary(state.train)
    found = peak(program, train, state.agent, jax.numpy.asarray(False), False)
    if found is not None:
        check_phase(found, 1, device_memory.nbytes(state), programs.where.learner)


def _fit(seeds: int) -> str:
    """How many seeds fit, as a message says it: "1 seed fits", "3 seeds fit"."""
    return f"{terminal.counted(seeds, 'seed')} {'fits' if seeds == 1 else 'fit'}"

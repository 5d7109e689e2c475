"""The memory checks' one-line refusals: sizes, and how many seeds fit."""

import types

import jax
import pytest

from batchrl.training import device_memory, together_memory


def test_a_refusal_of_one_seed_or_room_for_one_reads_singular(monkeypatch):
    device = jax.devices("cpu")[0]
    programs = types.SimpleNamespace(where=types.SimpleNamespace(learner=device), storage_bytes=100)
    monkeypatch.setattr(device_memory, "available", lambda device: 150)
    with pytest.raises(
        MemoryError, match=r"^the storage of 2 seeds takes .*: at most 1 seed fits$"
    ):
        together_memory.check_storage(programs, 2)
    monkeypatch.setattr(device_memory, "available", lambda device: 50)
    with pytest.raises(MemoryError, match=r"^the storage of 1 seed takes .*: at most 0 seeds fit$"):
        together_memory.check_storage(programs, 1)
    peak = together_memory.Peak(arguments=0, outputs=40, temporaries=20)
    with pytest.raises(
        MemoryError, match=r"^a train phase of 2 seeds needs .*: at most 1 seed fits$"
    ):
        together_memory.check_phase(peak, 2, 40, device)
    with pytest.raises(MemoryError, match=r"^a train phase of 1 seed needs .*: not one seed fits"):
        together_memory.check_phase(peak, 1, 100, device)

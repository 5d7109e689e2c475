"""The memory checks' one-line refusals: sizes, and how many seeds fit."""

import re
import types

import jax
import pytest

import batchrl
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
    with pytest.raises(MemoryError, match=r"^the train phase needs .*: lower num_envs, policy_l"):
        together_memory.check_phase(peak, 1, 100, device)


def test_a_solo_run_whose_phase_needs_more_than_is_free_is_refused_before_it_runs(
    monkeypatch, tmp_path
):
    # Its storage of 120 KiB fits the 2 MiB said free; its phase's temporaries (22 MiB) do
    # not. Only the storage was checked: on the CPU the system killed such a run unsaid.
    monkeypatch.setattr(device_memory, "available", lambda device: 2 * 2**20)
    settings = dict(objective="clipped", num_envs=64, steps_per_update=64, num_minibatches=1)
    with pytest.raises(MemoryError) as refused:
        batchrl.train("pendulum_jax", steps=4096, logdir=tmp_path, **settings)
    assert re.fullmatch(
        r"the train phase needs 2\d\.\d MiB beyond the run's state's 61\d\.\d KiB, more than "
        r"the 2\.0 MiB free on cpu: lower num_envs, policy_layers, value_layers, max_length, "
        r"update_every or steps_per_update",
        str(refused.value),
    )
    assert not any(tmp_path.iterdir())  # Nothing trained, no folder left.


def test_seeds_built_together_hold_their_storage_once_beside_the_stacked_copy():
    # A seed's own storage each beside the stacked one held twice what `check_storage`
    # counts: 60 `pendulum_jax` seeds that passed it were killed by the system unsaid.
    from batchrl.configs import presets, train_config
    from batchrl.training import environments, together

    config = train_config.replace(presets.get("pendulum_jax"), update_every=30, num_envs=4)
    configs = [train_config.replace(config, seed=seed) for seed in range(4)]
    env, _ = environments.build(config)
    group, states = together.build(configs, env)
    stacked = group.stack(states)
    rest = [state.replace(agent=state.agent.replace(storage=())) for state in states]
    storage = group.solo.storage_bytes
    assert device_memory.nbytes(stacked.agent.storage) == 4 * storage
    held = device_memory.nbytes([states, stacked])
    assert held == device_memory.nbytes(rest) + storage + device_memory.nbytes(stacked)

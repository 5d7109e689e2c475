"""Tests for checkpoint: exact round trips, retention, corruption, structure checks, no pickle."""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import pickle
import tempfile
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from batchrl.parts import episode_memory
from batchrl.ppo import agent_networks, clipped
from batchrl.ppo import config as config_lib
from batchrl.testing import jax_mock
from batchrl.training import checkpoint, file_writes


class _MLP(nn.Module):
    hidden: int = 32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.tanh(nn.Dense(self.hidden)(obs)))


@flax.struct.dataclass
class _TrainState:
    params: Any
    opt_state: Any
    key: jax.Array
    updates: int
    learning_rate: float
    extra: dict


def _state(seed: int, hidden: int = 32, obs_size: int = 3) -> _TrainState:
    key, init_key = jax.random.split(jax.random.key(seed))
    params = _MLP(hidden).init(init_key, jnp.zeros((1, 4)))
    opt_state = optax.adam(1e-3).init(params)
    extra = {
        "normalizer": {
            "count": jnp.asarray(seed + 1, jnp.int32),
            "mean": jnp.arange(obs_size, dtype=jnp.float32) * (seed + 1),
        },
        "episodes": seed * 7,
        "best_return": seed * 0.5 - 1.25,
        "schedule": np.linspace(0.0, 1.0, 4) + seed,
    }
    return _TrainState(params, opt_state, key, seed * 100, seed * 1e-4 + 3e-4, extra)


def _assert_same(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert type(got) is type(want)
        if isinstance(want, jax.Array) and jax.dtypes.issubdtype(want.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(got) == jax.random.key_impl(want)
            got, want = jax.random.key_data(got), jax.random.key_data(want)
        if isinstance(want, jax.Array | np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        else:
            assert got == want


def _corrupt(path: pathlib.Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "flip":
        data[-10] ^= 0xFF
    elif how == "magic":
        data[0] ^= 0xFF
    elif how == "empty":  # A file copied or synced while it was written, say.
        data = bytearray()
    path.write_bytes(bytes(data))


def test_round_trip_is_exact(tmp_path):
    state = _state(seed=1)
    path = checkpoint.save(tmp_path, 7, state)
    assert path == tmp_path / "ckpt-000000000007.bin"
    restored = checkpoint.load(path, _state(seed=0))
    _assert_same(restored, state)
    # The restored key is usable as a key.
    assert jax.random.uniform(restored.key) == jax.random.uniform(state.key)


def test_keep_deletes_older(tmp_path):
    state = _state(seed=0)
    for step in range(1, 6):
        checkpoint.save(tmp_path, step, state, keep=3)
    assert checkpoint.steps(tmp_path) == [3, 4, 5]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000000003.bin",
        "ckpt-000000000004.bin",
        "ckpt-000000000005.bin",
    ]


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("truncate", "truncated"),
        ("flip", "checksum mismatch"),
        ("magic", "bad magic"),
        ("empty", "empty: 0 bytes, not a checkpoint's header"),  # Was bad magic.
    ],
)
def test_corrupt_newest_falls_back_with_warning(tmp_path, caplog, how, reason):
    old, new = _state(seed=1), _state(seed=2)
    checkpoint.save(tmp_path, 10, old)
    newest = checkpoint.save(tmp_path, 20, new)
    _corrupt(newest, how)
    with pytest.raises(checkpoint.CheckpointError, match=reason) as error:
        checkpoint.load(newest, _state(seed=0))
    assert str(newest) in str(error.value) and "\n" not in str(error.value)
    with caplog.at_level(logging.WARNING, logger="batchrl.training"):
        step, restored = checkpoint.load_latest(tmp_path, _state(seed=0))
    assert step == 10
    _assert_same(restored, old)
    (warning,) = [r for r in caplog.records if r.name == "batchrl.training"]
    assert warning.levelno == logging.WARNING
    assert newest.name in warning.getMessage() and reason in warning.getMessage()


def test_all_corrupt_raises(tmp_path):
    for step in (1, 2):
        _corrupt(checkpoint.save(tmp_path, step, _state(seed=step)), "flip")
    with pytest.raises(checkpoint.CheckpointError, match="none of the 2 checkpoints"):
        checkpoint.load_latest(tmp_path, _state(seed=0))


def test_no_checkpoints_gives_none(tmp_path):
    assert checkpoint.load_latest(tmp_path, _state(seed=0)) is None
    assert checkpoint.load_latest(tmp_path / "missing", _state(seed=0)) is None
    assert checkpoint.steps(tmp_path / "missing") == []


def test_structure_mismatch_names_the_leaf(tmp_path):
    path = checkpoint.save(tmp_path, 1, _state(seed=1))
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.load(path, _state(seed=0, obs_size=4))
    message = str(error.value)
    assert str(path) in message
    assert "structure mismatch at /extra/normalizer/mean" in message
    assert "float32[3]" in message and "float32[4]" in message

    shape = r"/params/params/Dense_\d/\w+: checkpoint has float32"
    with pytest.raises(checkpoint.CheckpointError, match=shape):
        checkpoint.load(path, _state(seed=0, hidden=16))

    target = _state(seed=0)
    missing = target.replace(extra={**target.extra, "new_stat": jnp.zeros(2)})
    with pytest.raises(checkpoint.CheckpointError, match="/extra/new_stat: only in the target"):
        checkpoint.load(path, missing)

    as_float = target.replace(updates=0.0)
    with pytest.raises(checkpoint.CheckpointError, match="/updates: checkpoint has int"):
        checkpoint.load(path, as_float)

    rbg = target.replace(key=jax.random.key(0, impl="rbg"))
    with pytest.raises(checkpoint.CheckpointError, match=r"/key: checkpoint has key<threefry"):
        checkpoint.load(path, rbg)


def test_crash_leftovers_are_ignored(tmp_path):
    state = _state(seed=1)
    checkpoint.save(tmp_path, 10, state)
    # What a writer killed mid-write leaves: a partial temporary file, never a final name.
    (tmp_path / ".ckpt-000000000020.bin.x1y2z3.tmp").write_bytes(checkpoint.MAGIC + b"\x01")
    (tmp_path / "ckpt-000000000030.bin.tmp").write_bytes(b"partial")
    assert checkpoint.steps(tmp_path) == [10]
    step, restored = checkpoint.load_latest(tmp_path, _state(seed=0))
    assert step == 10
    _assert_same(restored, state)


def test_failed_write_leaves_no_final_file(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, 10, _state(seed=1))

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(tmp_path, 20, _state(seed=2), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000000010.bin"]


def test_a_save_keeps_what_it_wrote_and_leaves_higher_steps_alone(tmp_path):
    # Three files of higher steps (another run's) made each save delete what it wrote.
    for step in (900, 901, 902):
        checkpoint.path_for(tmp_path, step).write_bytes(b"")
    for step in range(1, 5):
        checkpoint.save(tmp_path, step, _state(seed=step), keep=3)
    assert checkpoint.steps(tmp_path) == [2, 3, 4, 900, 901, 902]
    checkpoint.save(tmp_path, 5, _state(seed=5), keep=5)  # Fewer than it keeps: all stay.
    assert checkpoint.steps(tmp_path) == [2, 3, 4, 5, 900, 901, 902]


@pytest.mark.parametrize(
    ("module", "name", "code"),
    [(os, "fsync", errno.ENOSPC), (tempfile, "mkstemp", errno.EACCES)],  # Mid-way; read-only.
)
def test_a_failed_write_is_one_line_naming_the_file_and_keeps_the_last_good(
    tmp_path, monkeypatch, module, name, code
):
    checkpoint.save(tmp_path, 10, _state(seed=1))

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(module, name, fail)
    with pytest.raises(file_writes.WriteError) as raised:
        checkpoint.save(tmp_path, 20, _state(seed=2), keep=1)
    message = str(raised.value)
    assert message.startswith(f"cannot write '{tmp_path}/ckpt-000000000020.bin': ")
    assert os.strerror(code) in message and "then resume the run" in message
    assert "\n" not in message
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000000010.bin"]
    assert checkpoint.load_latest(tmp_path, _state(seed=0))[0] == 10


def test_no_pickle(tmp_path, monkeypatch):
    state = _state(seed=1)
    path = checkpoint.save(tmp_path, 3, state)
    payload = path.read_bytes()[len(checkpoint.MAGIC) :][4 + 8 + 32 :]
    assert not payload.startswith(b"\x80")
    assert b"\x80\x04\x95" not in payload and b"\x80\x05\x95" not in payload

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used while loading")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    _assert_same(checkpoint.load(path, _state(seed=0)), state)


def test_unsupported_leaf_is_refused(tmp_path):
    state = {"weights": jnp.ones(2), "callback": object()}
    with pytest.raises(checkpoint.CheckpointError, match="/callback of type object"):
        checkpoint.save(tmp_path, 1, state)
    assert checkpoint.steps(tmp_path) == []


def test_an_agent_over_a_dict_observation_round_trips_in_its_dtypes(tmp_path):
    # The rollout keeps each observation leaf in its dtype (uint8, int32, float32) and the
    # normaliser holds None at leaves it does not scale: both come back as they were.
    env = jax_mock.DictCountingBatch((2, 3), end="truncated")
    config = config_lib.ClippedConfig(steps_per_update=4, num_minibatches=2)
    networks = agent_networks.for_env(config, env)
    shape = config_lib.RunShape(num_envs=2, max_length=8, steps=100)
    state = clipped.init(networks, shape, jax.random.key(0))
    obs = jax.tree.map(lambda x: x + 7, state.storage.rollout.obs)
    state = state.replace(
        storage=state.storage.replace(rollout=state.storage.rollout.replace(obs=obs))
    )
    checkpoint.save(tmp_path, 5, state)
    fresh = clipped.init(networks, shape, jax.random.key(1))
    loaded = checkpoint.load(checkpoint.path_for(tmp_path, 5), fresh)
    _assert_same(loaded, state)
    assert loaded.storage.rollout.obs["image"].dtype == jnp.uint8
    assert loaded.learner.obs_norm["image"] is None


def test_a_part_of_the_state_loads_alone_and_a_missing_part_is_named(tmp_path):
    whole = _state(seed=2)
    path = checkpoint.save(tmp_path, 1, whole)
    _assert_same(
        checkpoint.load(path, _state(seed=0).extra["normalizer"], ("extra", "normalizer")),
        whole.extra["normalizer"],
    )
    step, part = checkpoint.load_latest(tmp_path, _state(seed=0).params, ("params",))
    assert step == 1
    _assert_same(part, whole.params)
    with pytest.raises(
        checkpoint.CheckpointError, match=r"structure mismatch at /extra/nope: only in the target$"
    ):
        checkpoint.load(path, whole.extra, ("extra", "nope"))
    with pytest.raises(
        checkpoint.CheckpointError, match=r"structure mismatch at /extra/normalizer/mean: "
    ):
        checkpoint.load(
            path, _state(seed=0, obs_size=4).extra["normalizer"], ("extra", "normalizer")
        )


def test_a_part_left_out_is_loaded_from_the_target(tmp_path):
    state = _state(seed=1)
    whole = checkpoint.save(tmp_path / "whole", 1, state)
    lean = checkpoint.save(tmp_path / "lean", 1, state, fresh=[("params",)])
    params_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(state.params))
    assert lean.stat().st_size < whole.stat().st_size - params_bytes
    target = _state(seed=0)
    loaded = checkpoint.load(lean, target)
    _assert_same(loaded.params, target.params)
    _assert_same(loaded.replace(params=state.params), state)
    with pytest.raises(ValueError, match=r"^fresh path extra/nope is not in the state$"):
        checkpoint.save(tmp_path, 2, state, fresh=[("extra", "nope")])


def test_the_best_state_keeps_the_score_it_was_kept_for(tmp_path):
    state = _state(0)
    path = checkpoint.save_best(tmp_path, 4, state, score=-269.5)
    assert checkpoint.best_of(path) == (4, -269.5)
    _assert_same(checkpoint.load(path, _state(1)), state)
    older = checkpoint.save(tmp_path, 4, state)  # As best.bin was written before scores.
    assert checkpoint.best_of(older) == (4, None)


def test_runs_saved_before_int64_boxes_widened_and_unbounded_images_normalised_load(
    tmp_path, caplog
):
    # Their observations int32 where they now arrive as float32, and no statistics where
    # an unbounded image now has them: both were "structure mismatch", blamed on config.
    old = {"obs": {"counts": np.array([[4, 2**20]], np.int32)}, "obs_norm": {"frame": None}}
    checkpoint.save(tmp_path, 1, old)
    fresh = {"mean": np.zeros((2, 2, 1), np.float32), "count": np.zeros((), np.float32)}
    target = {"obs": {"counts": np.zeros((1, 2), np.float32)}, "obs_norm": {"frame": fresh}}
    with caplog.at_level(logging.WARNING, logger="batchrl.training"):
        _, restored = checkpoint.load_latest(tmp_path, target)
    np.testing.assert_array_equal(restored["obs"]["counts"], [[4.0, 2.0**20]])
    assert restored["obs"]["counts"].dtype == np.float32
    assert jax.tree.map(np.shape, restored["obs_norm"]["frame"]) == {"mean": (2, 2, 1), "count": ()}
    assert not np.any(restored["obs_norm"]["frame"]["mean"])  # As a new run's statistics.
    assert "holds no statistics at /obs_norm/frame" in caplog.text
    with pytest.raises(checkpoint.CheckpointError, match="structure mismatch"):  # Elsewhere.
        checkpoint.load_latest(tmp_path, {**target, "obs_norm": {"frame": np.zeros(1)}})


def test_an_episode_memory_keeps_the_steps_it_holds_and_loads_zeros_past_them(tmp_path):
    # Slots of 100 steps holding episodes of 3 and 7 (one running) and one of 100: saved,
    # the steps they hold; loaded, those steps and zeros where the padding was.
    step = {"obs": {"image": np.zeros((2, 5), np.uint8)}, "reward": np.float32(0)}
    memory = episode_memory.init(step, num_envs=2, capacity=2, max_length=100)
    rng = np.random.default_rng(0)
    for length, env in ((3, 0), (7, 1), (100, 0)):
        mask = np.arange(2) == env
        memory = episode_memory.begin(memory, mask)
        for _ in range(length):
            written = {
                "obs": {"image": rng.integers(1, 255, (2, 2, 5), np.uint8)},
                "reward": rng.normal(size=2).astype(np.float32),
            }
            memory = episode_memory.append(memory, written, mask)
        memory = episode_memory.finish(memory, mask) if length != 7 else memory
    state = {"agent": {"storage": memory, "step": np.int32(3)}}
    whole = checkpoint.save(tmp_path / "whole", 1, state)
    held = checkpoint.save(tmp_path / "held", 1, state, held=[("agent", "storage")])
    steps_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(memory.steps))
    assert held.stat().st_size < whole.stat().st_size - steps_bytes * 0.45  # 110 of 400 held.
    target = {"agent": {"storage": episode_memory.init(step, 2, 2, 100), "step": np.int32(0)}}
    loaded = checkpoint.load(held, target)["agent"]["storage"]
    valid = np.arange(100)[None, :] < np.asarray(memory.length)[:, None]
    pairs = zip(jax.tree.leaves(memory.steps), jax.tree.leaves(loaded.steps), strict=True)
    for saved, restored in pairs:
        kept = valid.reshape(valid.shape + (1,) * (saved.ndim - 2))
        np.testing.assert_array_equal(restored, np.where(kept, saved, 0))
    _assert_same(loaded.replace(steps=memory.steps), memory)
    with pytest.raises(ValueError, match=r"^held path agent/nope is not in the state$"):
        checkpoint.save(tmp_path, 2, state, held=[("agent", "nope")])


def test_an_episode_memory_of_other_lengths_or_slots_is_one_line(tmp_path):
    memory = episode_memory.init({"reward": np.float32(0)}, num_envs=1, capacity=1, max_length=10)
    path = checkpoint.save(tmp_path, 1, {"storage": memory}, held=[("storage",)])
    _assert_same(checkpoint.load(path, {"storage": memory})["storage"], memory)  # None held.
    for slots, max_length, said in (
        (2, 20, "episodes of up to 10 steps, target has 20"),
        (3, 10, "episode lengths [2], expected [3]"),
    ):
        target = episode_memory.init({"reward": np.float32(0)}, 1, slots - 1, max_length)
        with pytest.raises(checkpoint.CheckpointError) as raised:
            checkpoint.load(path, {"storage": target})
        assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)
        assert str(raised.value).endswith(f"{said} at /storage")
    with pytest.raises(checkpoint.CheckpointError, match=r"an episode memory, target has \['a'\]"):
        checkpoint.load(path, {"storage": {"a": np.zeros(2)}})
    other = episode_memory.init({"return": np.float32(0)}, 1, 1, 10)
    with pytest.raises(checkpoint.CheckpointError, match=r"at /storage/steps/re\w+: only in the"):
        checkpoint.load(path, {"storage": other})

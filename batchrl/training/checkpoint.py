"""Checkpoints of a training run's state: atomic, checksummed, and free of pickle.

A checkpoint holds one state pytree (flax.struct dataclasses, dicts, optax states, jax and numpy
arrays including typed PRNG key arrays, Python scalars) as a flax state dict packed with msgpack,
so loading a run folder never executes code. Loading restores into a `target` pytree of the same
structure, usually a freshly initialised state, and checks every leaf's shape and dtype.

File layout of `ckpt-{step:012d}.bin` (and of `best.bin`, the run's best-evaluated state,
which retention never deletes), little endian:

    magic (8 bytes) | format version (uint32) | payload length (uint64) | sha256 (32 bytes)
    payload: msgpack of {"step": int, "state": encoded state dict}, and in `best.bin` also
    "score": the evaluation return it was kept for (files from before it lack it)

A subtree a later run rebuilds as it was built (an emptied rollout buffer) can be left out
(`save`'s `fresh`): the file holds a mark in its place, and `load` takes it from the target.
An episode memory is saved with the steps it holds, not its padding (`held`, `held_steps`).

Files are written to a temporary name in the same directory, flushed and fsynced, then renamed,
so a crash mid-write never leaves a half-written file under a final name; `steps` ignores the
temporary files such a crash leaves behind, and the run that resumes the folder removes them
(`run_folder.remove_partial_files`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import re
import struct
from collections.abc import Sequence
from typing import Any, NoReturn

import jax
import numpy as np
from flax import serialization

from batchrl.training import file_writes, held_steps, older_checkpoints, run_folder

logger = logging.getLogger("batchrl.training")

MAGIC = b"BRLCKPT\x00"
VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, sha256 of payload.
_NAME = re.compile(r"ckpt-(\d{12})\.bin")
BEST = run_folder.BEST
_KEY_MARK = "__prng_key__"  # Encoded key array: {_KEY_MARK: impl name, "key_data": uint array}.
_FRESH_MARK = "__fresh__"  # A subtree left out: {_FRESH_MARK: True}; the target's is loaded.
_SCALARS = (bool, int, float, str, type(None))


class CheckpointError(Exception):
    """A checkpoint cannot be written or read, or does not match the target state."""


def path_for(directory: str | os.PathLike, step: int) -> pathlib.Path:
    """The final file name of the checkpoint of `step` in `directory`."""
    return pathlib.Path(directory) / f"ckpt-{step:012d}.bin"


def save(
    directory: str | os.PathLike,
    step: int,
    state: Any,
    keep: int = 3,
    fresh: Sequence[tuple[str, ...]] = (),
    held: Sequence[tuple[str, ...]] = (),
) -> pathlib.Path:
    """Writes `state` atomically as the checkpoint of `step`, then keeps only the newest `keep`.

    Retention is by step number: after the write, checkpoints of lower steps but the
    newest `keep` - 1 are deleted. The one written stays, and so does any of a higher step
    (files another run left; `keeper.restore` sets aside those that do not load).

    Args:
        directory: Run folder; created if missing.
        step: Non-negative training step, used in the file name.
        state: The pytree to save.
        keep: How many checkpoints to keep, at least 1.
        fresh: Paths of field names (e.g. ("agent", "storage")) to subtrees left out:
            `load` takes them from its target, a freshly built state.
        held: Paths to episode memories saved with the steps they hold, not their padding
            (`held_steps`).

    Returns:
        The path of the written checkpoint.

    Raises:
        CheckpointError: `state` holds a leaf that cannot be stored without pickle.
        ValueError: `step` is negative or `keep` is below 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    directory = pathlib.Path(directory)
    data = _pack(step, state, fresh, held=held)
    path = path_for(directory, step)
    file_writes.write_atomic(path, data)
    older = [found for found in steps(directory) if found < step]
    for old in older[: max(len(older) - (keep - 1), 0)]:
        path_for(directory, old).unlink(missing_ok=True)
    return path


def save_best(
    directory: str | os.PathLike,
    step: int,
    state: Any,
    fresh: Sequence[tuple[str, ...]] = (),
    score: float | None = None,
) -> pathlib.Path:
    """Writes `state` atomically as `best.bin` in `directory`, replacing the one there.

    `score`, the evaluation return it is kept for, is kept with it (`best_of`): a resumed
    run compares its phases with it even where the metrics rows that said it are gone.
    """
    path = pathlib.Path(directory) / BEST
    data = _pack(step, state, fresh, score)
    file_writes.write_atomic(path, data)
    return path


def step_of(path: str | os.PathLike) -> int:
    """The step a checkpoint file holds, read and checked as `load` does."""
    return best_of(path)[0]


def best_of(path: str | os.PathLike) -> tuple[int, float | None]:
    """The step a checkpoint file holds and the score `save_best` kept it for (else None)."""
    try:
        step, _, score = _read(pathlib.Path(path))
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    return step, score


def _pack(
    step: int,
    state: Any,
    fresh: Sequence[tuple[str, ...]] = (),
    score: float | None = None,
    held: Sequence[tuple[str, ...]] = (),
) -> bytes:
    """The file's bytes: header, then the msgpack payload of `step`, `state` and `score`."""
    if step < 0 or step >= 10**12:
        raise ValueError(f"step must be in [0, 1e12), got {step}")
    tree = serialization.to_state_dict(state)
    for path in held:
        tree = _replaced(tree, path, held_steps.pack, "held")
    for path in fresh:
        tree = _replaced(tree, path, lambda _: {_FRESH_MARK: True}, "fresh")
    encoded = _encode(tree, "")
    contents = {"step": step, "state": encoded}
    if score is not None:
        contents["score"] = float(score)
    payload = serialization.msgpack_serialize(contents)
    return _HEADER.pack(MAGIC, VERSION, len(payload), hashlib.sha256(payload).digest()) + payload


def steps(directory: str | os.PathLike) -> list[int]:
    """Steps of the checkpoints in `directory`, ascending; empty if it does not exist."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    found = (_NAME.fullmatch(entry.name) for entry in directory.iterdir())
    return sorted(int(match.group(1)) for match in found if match)


def load(path: str | os.PathLike, target: Any, part: tuple[str, ...] = ()) -> Any:
    """Reads the checkpoint at `path` into the structure of `target`.

    Args:
        path: A checkpoint file written by `save`.
        target: A pytree of the saved structure, e.g. a freshly initialised state; only its
            structure, shapes, dtypes and key implementations are used.
        part: The field names that lead from the saved state to the subtree `target`
            has the structure of, e.g. ("agent", "learner"); () for the whole state.

    Returns:
        A pytree like `target` holding the saved values.

    Raises:
        CheckpointError: With a one-line message naming the file and what is wrong: unreadable,
            bad magic, unsupported version, truncated, checksum mismatch, undecodable payload,
            step mismatch, or structure mismatch at the first differing leaf path.
    """
    path = pathlib.Path(path)
    try:
        step, encoded, _ = _read(path)
        match = _NAME.fullmatch(path.name)
        if match and int(match.group(1)) != step:
            raise CheckpointError(f"step mismatch: the file holds step {step}")
        where = ""
        for name in part:
            if not isinstance(encoded, dict) or name not in encoded:
                raise CheckpointError(f"structure mismatch at {where}/{name}: only in the target")
            encoded, where = encoded[name], f"{where}/{name}"
        restored = _restore(encoded, serialization.to_state_dict(target), where)
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    try:
        return serialization.from_state_dict(target, restored)
    except (ValueError, TypeError, KeyError) as error:  # Flax's own checks, as a backstop.
        message = " ".join(str(error).split())
        raise CheckpointError(f"{path}: structure mismatch: {message}") from None


_LISTINGS = 5  # Tries of `load_latest` while a run training on removes what it listed.


def load_latest(
    directory: str | os.PathLike, target: Any, part: tuple[str, ...] = ()
) -> tuple[int, Any] | None:
    """Loads the newest checkpoint in `directory` that loads, skipping corrupt newer ones.

    A checkpoint removed between listing and reading (a run training on keeps its last
    few) is not corrupt: the folder is listed again. Each skipped checkpoint is reported as
    a warning on the "batchrl.training" logger.

    Args:
        directory: Run folder.
        target: A pytree of the saved structure; see `load`.
        part: The subtree of the saved state to read; see `load`.

    Returns:
        `(step, state)` of the newest loadable checkpoint, or None if there are none.

    Raises:
        CheckpointError: Checkpoints exist but none of them loads.
    """
    for _ in range(_LISTINGS):
        available = steps(directory)
        if not available:
            return None
        failed = []
        for step in reversed(available):
            path = path_for(directory, step)
            try:
                return step, load(path, target, part)
            except CheckpointError as error:
                if not path.exists():  # Rotated away by the run training on: a newer one is there.
                    break
                logger.warning("Skipping checkpoint %s", error)
                failed.append(error)
        else:
            # The newest's reason in the error itself: where warnings go unseen, it says why.
            raise CheckpointError(
                f"none of the {len(available)} checkpoints in {directory} loads; the newest, "
                f"{failed[0]}"
            )
    raise CheckpointError(
        f"the checkpoints in {directory} were each removed as they were read, {_LISTINGS} "
        "times: is a run with keep_checkpoints=1 training there?"
    )


def _read(path: pathlib.Path) -> tuple[int, Any, float | None]:
    """Checks the header of the file at `path` and decodes its payload to (step, state, score)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"unreadable: {error.strerror}") from None
    if not data:
        raise CheckpointError("empty: 0 bytes, not a checkpoint's header")
    if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        raise CheckpointError("bad magic: not a batchrl checkpoint")
    if len(data) < _HEADER.size:
        raise CheckpointError(f"truncated: {len(data)} bytes is shorter than the header")
    _, version, length, digest = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CheckpointError(f"unsupported format version {version}, expected {VERSION}")
    payload = data[_HEADER.size :]
    if len(payload) < length:
        raise CheckpointError(f"truncated: payload has {len(payload)} of {length} bytes")
    if len(payload) > length:
        raise CheckpointError(f"length mismatch: payload has {len(payload)} bytes, not {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError("checksum mismatch: the payload is corrupted")
    try:
        contents = serialization.msgpack_restore(payload)
        score = contents.get("score")
        return int(contents["step"]), contents["state"], None if score is None else float(score)
    except Exception as error:  # A valid checksum over bytes that were never a checkpoint.
        said = str(error).splitlines()[0] if str(error) else ""
        raise CheckpointError(
            f"undecodable payload: {type(error).__name__} {said}".strip()
        ) from None


def _is_key(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _describe(leaf: Any) -> str:
    """A short description of a leaf for error messages, e.g. `float32[4,64]`."""
    if isinstance(leaf, dict):
        if _KEY_MARK in leaf:
            return f"key<{leaf[_KEY_MARK]}>{list(np.shape(leaf.get('key_data')))}"
        return f"a subtree with keys {sorted(leaf)}"
    if _is_key(leaf):
        return f"key<{jax.random.key_impl(leaf)}>{list(leaf.shape)}"
    if isinstance(leaf, jax.Array | np.ndarray | np.generic):
        return f"{leaf.dtype}{list(np.shape(leaf))}".replace(" ", "")
    return type(leaf).__name__


def _replaced(tree: dict, path: tuple[str, ...], function, kind: str) -> dict:
    """`tree` (a state dict) with the subtree at `path` replaced by `function` of it."""
    nodes = [tree]
    for name in path:
        if not isinstance(nodes[-1], dict) or name not in nodes[-1]:
            raise ValueError(f"{kind} path {'/'.join(path)} is not in the state")
        nodes.append(nodes[-1][name])
    marked: Any = function(nodes[-1])
    for node, name in zip(reversed(nodes[:-1]), reversed(path), strict=True):
        marked = {**node, name: marked}
    return marked


def _encode(node: Any, path: str) -> Any:
    """Replaces the leaves of a state dict by values msgpack stores without pickle."""
    if isinstance(node, dict):
        return {key: _encode(value, f"{path}/{key}") for key, value in node.items()}
    if _is_key(node):
        data = np.asarray(jax.random.key_data(node))
        return {_KEY_MARK: str(jax.random.key_impl(node)), "key_data": data}
    if isinstance(node, jax.Array):
        return np.asarray(node)
    if isinstance(node, np.ndarray | np.generic) and node.dtype.kind not in "OV":
        return node
    if isinstance(node, _SCALARS):
        return node
    raise CheckpointError(f"cannot checkpoint leaf {path or '/'} of type {type(node).__name__}")


def _restore(saved: Any, target: Any, path: str) -> Any:
    """Decodes `saved` leaf by leaf into the state dict structure of `target`."""
    if isinstance(saved, dict) and saved.get(_FRESH_MARK) is True:
        return target  # Left out when saved: as freshly built.
    if held_steps.packed(saved) and isinstance(target, dict):
        try:
            saved = held_steps.unpack(saved, target)
        except held_steps.HeldStepsError as error:
            raise CheckpointError(f"{error} at {path}") from None
    if (older := older_checkpoints.read(saved, target, path)) is not older_checkpoints.NOT_OLDER:
        return older
    if isinstance(target, dict):
        if not isinstance(saved, dict) or _KEY_MARK in saved:
            _mismatch(path, saved, target)
        for key in sorted(set(target) ^ set(saved)):
            where = "target" if key in target else "checkpoint"
            raise CheckpointError(f"structure mismatch at {path}/{key}: only in the {where}")
        return {key: _restore(saved[key], value, f"{path}/{key}") for key, value in target.items()}
    if _is_key(target):
        return _restore_key(saved, target, path)
    if isinstance(target, jax.Array | np.ndarray | np.generic):
        if not isinstance(saved, np.ndarray | np.generic) or _describe(saved) != _describe(target):
            _mismatch(path, saved, target)
        if isinstance(target, jax.Array):
            return jax.device_put(saved)  # jnp.asarray compiles a program for a 0-d array.
        return np.array(saved) if isinstance(target, np.ndarray) else saved
    if type(saved) is not type(target):
        _mismatch(path, saved, target)
    return saved


def _restore_key(saved: Any, target: jax.Array, path: str) -> jax.Array:
    """Rebuilds a typed PRNG key array with the key implementation of `target`."""
    impl = jax.random.key_impl(target)
    expected = jax.random.key_data(target)
    if not isinstance(saved, dict) or saved.get(_KEY_MARK) != str(impl):
        _mismatch(path, saved, target)
    data = saved.get("key_data")
    if not isinstance(data, np.ndarray) or (data.shape, data.dtype) != (
        expected.shape,
        expected.dtype,
    ):
        _mismatch(path, saved, target)
    return jax.random.wrap_key_data(data, impl=impl)


def _mismatch(path: str, saved: Any, target: Any) -> NoReturn:
    raise CheckpointError(
        f"structure mismatch at {path or '/'}: checkpoint has {_describe(saved)}, "
        f"target has {_describe(target)}"
    )

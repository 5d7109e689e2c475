"""A Ctrl-C at a chosen call: a run stopped between phases, and its resume checked."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from batchrl.training import checkpoint


@contextlib.contextmanager
def ctrl_c_at_call(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, call: int
) -> Iterator[None]:
    """`owner.name` raising KeyboardInterrupt at its `call`-th call, inside the block.

    With a run's phase function, call k + 1 stops the run after k phases were checkpointed.
    """
    original, calls = getattr(owner, name), []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, interrupted)
        yield


def last_checkpoints(*logdirs: pathlib.Path) -> tuple[int, list[bytes]]:
    """The first run's last checkpoint step, and each run's checkpoint of that step, as bytes.

    Each of `logdirs` holds one run folder, as the train command writes it.
    """
    (first, *others) = [only_folder(logdir) / "checkpoints" for logdir in logdirs]
    last = checkpoint.steps(first)[-1]
    return last, [checkpoint.path_for(folder, last).read_bytes() for folder in (first, *others)]


def only_folder(logdir: pathlib.Path) -> pathlib.Path:
    """The one run folder in `logdir`."""
    (folder,) = logdir.iterdir()
    return folder

"""A Ctrl-C at a chosen call: a run stopped between phases, and its resume checked."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
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


@contextlib.contextmanager
def sigint_at_call(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, call: int, signals: int = 1
) -> Iterator[None]:
    """`signals` real SIGINTs sent as `owner.name` begins its `call`-th call, in the block.

    Python's own SIGINT handler is in place in the block, as at a terminal.
    """
    original, calls = getattr(owner, name), []

    def signalled(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == call:
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10**5):  # The handler runs at the next bytecode.
                    pass
        return original(*args, **kwargs)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, signalled)
            yield
    finally:
        signal.signal(signal.SIGINT, before)


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

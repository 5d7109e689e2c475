"""A Ctrl-C at a chosen call: a run stopped between phases, as a user stops it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


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

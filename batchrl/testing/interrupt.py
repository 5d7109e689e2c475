"""A Ctrl-C at a chosen call or wait: a run stopped between phases, and its resume checked."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from batchrl.training import checkpoint, thread_stack


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


@contextlib.contextmanager
def sigint_while_waiting(seconds: float = 60.0) -> Iterator[None]:
    """A SIGINT sent once this (main) thread waits on a worker (`polling.Poller.poll`).

    Not at a guessed time: a thread looks at the main thread's stack until it is in the
    wait, so the Ctrl-C lands there, as a user's during a slow step does.
    """
    main = threading.main_thread().ident

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while not any(
            name == "poll" and file.endswith("polling.py")
            for file, name in thread_stack.functions(main) or []
        ):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        watcher.join()


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

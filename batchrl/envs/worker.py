"""The worker process: builds its envs, serves the parent's commands, relays errors, exits cleanly.

Runs in a fresh interpreter (spawn or forkserver). It never outlives the parent: the
kernel kills it when the parent dies (PR_SET_PDEATHSIG), a watchdog thread exits when
it is re-parented, and it exits when the command pipe closes. It ignores SIGINT, so
Ctrl-C in a terminal reaches the parent, which then closes its workers in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection

import cloudpickle

from batchrl.envs import group as group_lib
from batchrl.envs import infos as infos_lib
from batchrl.envs import shared

_PR_SET_PDEATHSIG = 1
_WATCHDOG_PERIOD = 0.2


def main(conn: Connection, parent_pid: int, constructors_blob: bytes, spin: float = 0.0) -> None:
    """Entry point of a worker: `constructors_blob` is a cloudpickled list of env constructors.

    After each answer the worker polls for the next command for up to `spin` seconds,
    yielding its core between polls, before it blocks: a blocked process on an idle
    core wakes up slowly, which costs more than the stepping of a small env.
    """
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs = None
    try:
        envs = group_lib.EnvGroup(cloudpickle.loads(constructors_blob))
        conn.send(("ok", (envs.name, envs.observation_space, envs.action_space)))
        _serve(conn, envs, spin)
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # The parent is gone or closed the pipe: exit quietly.
    except BaseException as error:
        _send_error(conn, error)
    finally:
        if envs is not None:
            envs.close()
        conn.close()


def _serve(conn: Connection, envs: group_lib.EnvGroup, spin: float) -> None:
    mapping = None
    while True:
        if spin:
            spin_until_readable(conn, spin)
        command, *args = conn.recv()
        try:
            if command == "step":
                conn.send(("ok", infos_lib.encode(envs.step())))
            elif command == "reset":
                conn.send(("ok", envs.reset(*args)))
            elif command == "attribute":
                conn.send(("ok", envs.attribute(*args)))
            elif command == "call":
                conn.send(("ok", envs.call(*args)))
            elif command == "attach":
                path, nbytes = args
                mapping = shared.attach(path, nbytes)
                envs.buffers = group_lib.Buffers.over(
                    mapping, len(envs.envs), envs.observation_space, envs.action_space
                )
                conn.send(("ok", None))
            elif command == "close":
                envs.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown worker command {command!r}")
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise
        except Exception as error:
            _send_error(conn, error)


def spin_until_readable(conn: Connection, seconds: float) -> bool:
    """Polls `conn` without blocking for up to `seconds`, yielding the core between polls."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if conn.poll(0):
            return True
        os.sched_yield()
    return False


def _send_error(conn: Connection, error: BaseException) -> None:
    text = "".join(traceback.format_exception(error))
    with contextlib.suppress(OSError, EOFError, ValueError):
        conn.send(("error", (type(error).__name__, str(error), text)))


def _die_with_parent(parent_pid: int) -> None:
    """Makes sure this process ends when the parent does, however the parent ends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # Not Linux: the watchdog below still applies.
    initial_parent = os.getppid()  # The parent itself under spawn, the fork server otherwise.
    if not _alive(parent_pid):
        os._exit(1)

    def watchdog() -> None:
        while os.getppid() == initial_parent:
            time.sleep(_WATCHDOG_PERIOD)
        os._exit(1)

    threading.Thread(target=watchdog, name="batchrl-parent-watchdog", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

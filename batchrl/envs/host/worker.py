"""The worker process: builds its envs, serves the parent's commands, relays errors, exits cleanly.

Runs forked from a fork server, or in a fresh interpreter (spawn). It never outlives
the parent: the kernel kills it when its parent process dies (PR_SET_PDEATHSIG), a
watchdog thread exits when it is re-parented or the parent's end of its pipe closes,
and it exits when the command pipe closes. It ignores SIGINT and SIGTERM, which a
terminal's Ctrl-C and a scheduler send every process of a job: the parent, which stops
after its phase, closes its workers in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import threading
import traceback
from collections.abc import Sequence
from multiprocessing import reduction
from multiprocessing.connection import Connection

import cloudpickle

from batchrl.envs.host import errors, forwarding, mujoco_warnings, polling, shared, stepper
from batchrl.envs.host import infos as infos_lib

_PR_SET_PDEATHSIG = 1
_WATCHDOG_PERIOD = 0.2


def main(
    conn: Connection,
    parent_pid: int,
    constructors_blob: bytes,
    spin: float,
    bell: Connection,
    answer: Connection,
) -> None:
    """Entry point of a worker: `constructors_blob` cloudpickles its envs' constructors and mode.

    The mode is the batch's `observation_mode`, which says how alike their spaces must be.

    After each answer the worker polls for the next command for up to `spin` seconds,
    yielding its core between polls, before it blocks, while that catches the commands
    (`polling`): a blocked process on an idle core wakes up slowly, which costs more
    than the stepping of a small env. A step is
    asked for by one byte on `bell` (which also says how envs autoreset, and whether the
    parent reads the step's infos at once: they follow the answer on `conn`) and answered by
    one byte on `answer`, the actions and results being in shared memory; every other
    command goes through `conn`, and so does a step of spaces of no fixed size, whose
    values (`stepper.objects`) cannot lie in shared memory, or of actions in dtypes other
    than the space's (`actions.as_given`).
    """
    _die_with_parent(parent_pid, bell)
    # Ctrl-C at a terminal and a scheduler's SIGTERM reach every process of the job: the
    # parent finishes its phase with its workers, saves, then ends them. Caught, not
    # ignored: a process an env starts gets them back (an ignored signal outlives exec).
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _unheeded)
        signal.siginterrupt(number, False)  # An env's own system calls go on, as ignored.
    mujoco_warnings.route()  # Each once a worker, and no MUJOCO_LOG.TXT in the user's folder.
    envs = None
    try:
        envs = stepper.EnvStepper(*cloudpickle.loads(constructors_blob))
        _send_by_value(conn, ("ok", (envs.name, envs.observation_space, envs.action_space)))
        _serve(conn, envs, spin, bell, answer)
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # The parent is gone or closed the pipe: exit quietly.
    except BaseException as error:
        _send_error(conn, error)
    finally:
        if envs is not None:
            envs.close()
        conn.close()


# What an env's call may raise, said to the parent as the env's: its `sys.exit()` and
# KeyboardInterrupt too (signals are unheeded here, so one is the env's own). Ended by
# them, the worker's exit raced its error to the parent: "died (exit code 0)" or not.
_ENVS_OWN = (Exception, SystemExit, KeyboardInterrupt)


def _serve(
    conn: Connection, envs: stepper.EnvStepper, spin: float, bell: Connection, answer: Connection
) -> None:
    mapping = None
    # The parent writes one of the two at a time; the bell first, so that a step's ring is
    # read without the second poll a wait that saw only a later fd makes.
    poller = polling.Poller(spin, bell.fileno(), conn.fileno())
    kept: dict[int, list[dict]] = {}  # The infos of the last KEPT_STEPS steps.
    steps = 0
    while True:
        events = poller.poll()
        if bell.fileno() in dict(events):
            ring = os.read(bell.fileno(), 1)
            if not ring:
                return  # The parent is gone.
            autoreset, read = stepper.RINGS[ring]
            steps += 1
            kept.pop(steps - infos_lib.KEPT_STEPS, None)
            try:
                infos = envs.step(autoreset)
            except _ENVS_OWN as error:
                _send_error(conn, error)
                continue
            filled = any(infos)
            if not (read and filled):
                kept[steps] = infos
                os.write(answer.fileno(), stepper.ANSWERS[filled])
                continue
            # The answer first: infos larger than the pipe holds wait for the parent to read.
            os.write(answer.fileno(), stepper.SENT)
            try:
                _send_infos(conn, ("ok", infos_lib.encode(infos)), infos)
            except (EOFError, BrokenPipeError, ConnectionResetError):
                raise
            except Exception as error:  # Infos that do not pickle.
                _send_error(conn, error)
            continue
        command, *args = conn.recv()
        try:
            if command == "step":  # Leaves of no fixed size, or actions of other dtypes.
                values, ring, given = args
                stepper.put_objects(envs.buffers.action, values)
                steps += 1
                kept.pop(steps - infos_lib.KEPT_STEPS, None)
                autoreset, read = stepper.RINGS[ring]
                kept[steps] = envs.step(autoreset, given)
                infos = infos_lib.encode(kept[steps]) if read else None  # Read at once.
                reply = ("ok", (stepper.objects(envs.buffers.obs), read, infos))
                _send_infos(conn, reply, kept[steps] if read else ())
            elif command == "infos":
                _send_infos(conn, ("ok", infos_lib.encode(kept[args[0]])), kept[args[0]])
            elif command == "reset":
                infos = envs.reset(*args)
                _send_infos(conn, ("ok", (infos, stepper.objects(envs.buffers.obs))), infos)
            elif command in forwarding.COMMANDS:
                _send_by_value(conn, ("ok", getattr(envs, command)(*args)))
            elif command == "attach":
                path, nbytes = args
                mapping = shared.attach(path, nbytes)
                envs.buffers = stepper.Buffers.over(
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
        except _ENVS_OWN as error:
            _send_error(conn, error)


def _send_by_value(conn: Connection, message: tuple) -> None:
    """Sends `message` cloudpickled, so classes that came here by value go back by value.

    A class the envs' script defines (a space of its own in `__main__`) is one: plain
    pickle refuses it. Only answers off the step path go this way.
    """
    conn.send_bytes(cloudpickle.dumps(message))


def _send_infos(conn: Connection, message: tuple, infos: Sequence[dict]) -> None:
    """Sends an answer that carries `infos`; one that does not pickle is a PicklingError.

    The error names the info's key where an info is the cause: pickle's own words do not
    always say pickle (Python 3.13's "Can't get local object" of a lambda).
    """
    try:
        data = reduction.ForkingPickler.dumps(message)  # What `conn.send` would send.
    except Exception as error:
        keys = [key for info in infos for key, value in info.items() if not _pickles(value)]
        # Else an observation of no fixed size (a space's objects) is what does not pickle.
        said = f"info {keys[0]!r}" if keys else "the worker's answer (observations, infos)"
        raise pickle.PicklingError(
            f"{said} does not pickle, so it cannot reach the main process: "
            f"{type(error).__name__}: {error}"
        ) from error
    conn.send_bytes(data)


def _pickles(value: object) -> bool:
    try:
        reduction.ForkingPickler.dumps(value)
    except Exception:
        return False
    return True


def _send_error(conn: Connection, error: BaseException) -> None:
    text = "".join(traceback.format_exception(error))
    with contextlib.suppress(OSError, EOFError, ValueError):
        kind = type(error)
        index = errors.env_index(error)  # The env of the group that raised it, where one did.
        conn.send(
            ("error", (kind.__name__, str(error), text, kind.__module__, kind.__qualname__, index))
        )


def _unheeded(_signum: int, _frame: object) -> None:
    """A job's Ctrl-C or SIGTERM in a worker: nothing; the parent ends it."""


def _die_with_parent(parent_pid: int, bell: Connection) -> None:
    """Makes sure this process ends when the parent does, however the parent ends.

    Under a fork server the kernel's parent is the server, which lives as long as any
    worker does: the watchdog also ends the worker when the parent's end of `bell`
    closes, which only the parent holds and closes only after the worker has ended.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # Not Linux: the watchdog below still applies.
    initial_parent = os.getppid()  # The parent itself under spawn, the fork server otherwise.
    if not _alive(parent_pid):
        os._exit(1)

    def watchdog() -> None:
        hangup = select.poll()
        hangup.register(bell.fileno(), 0)  # Reports only a hang-up (or error) of the pipe.
        while os.getppid() == initial_parent and not hangup.poll(_WATCHDOG_PERIOD * 1000):
            pass
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

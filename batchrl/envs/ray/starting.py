"""Ray started whole: a Ctrl-C or SIGTERM that comes while `ray.init` starts Ray waits for it.

Cut short inside `ray.init`, the Ray processes it had started were not yet Ray's to shut
down: two of them (its dashboard and runtime-env agents) ran on for a minute or two after
the program ended. `init` holds the signal until Ray has started, then gives it to the
handler the process had: where that raises, Ray is shut down and the exception goes on.
A second signal comes at once. `ray.init` also puts a SIGTERM handler of its own
(sys.exit) in place of the process's, which comes back, so the train command still stops
with exit status 130 on SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from typing import Any

# How long an address in RAY_ADDRESS may take to answer before it is said unreachable.
REACH_SECONDS = 10.0
# How long it may take to answer HTTP/2's opening, its preface and an empty SETTINGS frame.
ANSWER_SECONDS = 2.0
HTTP2_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def init(ray: Any, **options: Any) -> None:
    """`ray.init(**options)`, the signals that come in it held until it has returned.

    A cluster that `RAY_ADDRESS` names is reached first: `ray.init` waits on an address
    nothing answers at for minutes, deaf to Ctrl-C. A refused connection (a cluster that
    takes a token the process lacks) is one line too, not Ray's traceback.
    """
    address = os.environ.get("RAY_ADDRESS", "")
    reach(address or _last_cluster(), named=bool(address))
    try:
        _init(ray, **options)
    except ConnectionError as error:
        if "Could not find any running Ray instance" in str(error):  # Nothing refused: none.
            raise ValueError(
                f"no Ray cluster runs on this machine for RAY_ADDRESS={address!r} to join: "
                "start one (ray start --head), name its head as HOST:6379, or unset "
                "RAY_ADDRESS to start Ray in this process (docs/cluster.md)"
            ) from None
        advice = (  # Set here: the token differs, or the address is not the cluster's own.
            "the token here (RAY_AUTH_TOKEN, ~/.ray/auth_token) must be the cluster's, and "
            "the address its head's HOST:6379, not its dashboard's or Ray Client's"
            if os.environ.get("RAY_AUTH_MODE")
            else "a cluster started with RAY_AUTH_MODE=token needs it set here too"
        )
        raise ValueError(
            f"Ray refused to connect to the cluster at RAY_ADDRESS={address!r} "
            f"({str(error).splitlines()[0]}); {advice} (docs/cluster.md)"
        ) from None


def reach(address: str, named: bool = True) -> None:
    """A one-line ValueError when `address` (host:port) does not answer.

    `named`: RAY_ADDRESS names it; else it is the cluster Ray last started on this
    machine, which `ray.init` joins. "auto", "local" and no address are Ray's to find or
    start.
    """
    if named and address.startswith(("http://", "https://")):  # What `ray job submit` takes.
        raise ValueError(
            f"RAY_ADDRESS={address!r} is a dashboard's address, which Ray's job CLI takes: "
            "give the cluster's head as HOST:6379 (or ray://HOST:10001 for Ray Client)"
        )
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        if named and address not in ("", "auto", "local") and not address.startswith("ray://"):
            raise ValueError(  # Ray's own: "Invalid address format: foo".
                f"RAY_ADDRESS={address!r} is not an address: give the cluster's head as "
                "HOST:6379 (ray://HOST:10001 for Ray Client), 'auto' for the cluster started "
                "last on this machine, or 'local' to start Ray in this process"
            )
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), REACH_SECONDS) as head:
            web = named and _answers_as_web_page(head)
    except OSError as error:
        why = error.strerror or type(error).__name__  # A timeout has no strerror.
        if named:
            raise ValueError(
                f"cannot reach the Ray cluster at RAY_ADDRESS={address!r} ({why}): start it "
                f"(ray start --head) or unset RAY_ADDRESS to start Ray in this process"
            ) from None
        raise ValueError(
            f"cannot reach the Ray cluster at {address!r} ({why}), which Ray joins as the "
            f"last one started on this machine: `ray stop` forgets it, RAY_ADDRESS=local "
            f"starts Ray in this process"
        ) from None
    if web:  # ray.init would wait on it for minutes, deaf to Ctrl-C.
        raise ValueError(
            f"RAY_ADDRESS={address!r} answers as a web server (a dashboard's port?), not as "
            "a Ray cluster: give the cluster's head as HOST:6379 (ray://HOST:10001 for Ray "
            "Client)"
        )


def _answers_as_web_page(head: socket.socket) -> bool:
    """Whether the server at `head` answers HTTP/2's opening as an HTTP/1 server does.

    A cluster's head (its GCS, or Ray Client's server) speaks gRPC, HTTP/2, and answers
    with a frame; a dashboard answers "HTTP/1.x 400". Silence (a TLS cluster waits for
    its handshake) or any other answer is left to `ray.init`.
    """
    head.settimeout(ANSWER_SECONDS)
    try:
        head.sendall(HTTP2_OPENING)
        answer = head.recv(16)
    except OSError:
        return False
    return answer.startswith((b"HTTP/", b"<"))  # A status line, or a bare HTML page.


def _last_cluster() -> str:
    """The address of the cluster Ray last started on this machine ("" if none or unknown).

    Ray's own lookup (a file in its temp folder), which `ray.init()` follows: a cluster
    killed without `ray stop` left it naming an address nothing answers at.
    """
    try:
        from ray._private import services

        return services.find_bootstrap_address(None) or ""
    except Exception:  # A Ray whose private module moved: `ray.init` finds it alone.
        return ""


def _init(ray: Any, **options: Any) -> None:
    if threading.current_thread() is not threading.main_thread():  # No signals come here.
        ray.init(**options)
        return
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    held = [number for number, handler in before.items() if callable(handler)]
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if received:  # Again: both now, Ray's processes left to end by themselves.
            first = received.pop()
            before[first](first, frame)
            before[signum](signum, frame)
            return
        received.append(signum)
        name = signal.Signals(signum).name
        line = f"batchrl: {name}: stopping when Ray has started; again to stop now\n"
        with contextlib.suppress(OSError):  # os.write: the handler may run inside a print.
            os.write(2, line.encode())

    for number in held:  # SIG_DFL and SIG_IGN are the kernel's: left to it.
        signal.signal(number, hold)
    try:
        ray.init(**options)
    finally:
        for number in held:
            signal.signal(number, before[number])
    if received:
        try:
            signal.raise_signal(received[0])  # Its handler runs here, raising or not.
        except BaseException:
            ray.shutdown()
            raise

"""Reaching the cluster RAY_ADDRESS names: an address nothing answers at is one line."""

import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from batchrl.envs.ray import starting


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port of this machine nothing listens on: held bound, not listening, so none can."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def test_an_address_nothing_answers_at_is_one_line_naming_it():
    with closed_port() as port, pytest.raises(ValueError) as error:
        address = f"127.0.0.1:{port}"
        starting.reach(address)
    assert str(error.value) == (
        f"cannot reach the Ray cluster at RAY_ADDRESS={address!r} (Connection refused): start "
        "it (ray start --head) or unset RAY_ADDRESS to start Ray in this process"
    )
    for left_to_ray in ("", "auto", "local"):
        starting.reach(left_to_ray)
    for malformed in ("localhost", "1.2.3", "head:port"):  # Ray's "Invalid address format".
        with pytest.raises(ValueError, match=rf"^RAY_ADDRESS={malformed!r} is not an address"):
            starting.reach(malformed)
    # The dashboard's address, as `ray job submit` takes it: "Name or service not known".
    with pytest.raises(ValueError, match=r"^RAY_ADDRESS='http://127.0.0.1:8265' is a dashb"):
        starting.reach("http://127.0.0.1:8265")
    # The cluster Ray last started here, killed without `ray stop`: ray.init waited on it.
    with closed_port() as port, pytest.raises(ValueError, match=r"which Ray joins as the last"):
        starting.reach(f"127.0.0.1:{port}", named=False)


def test_the_train_command_stops_at_once_on_an_address_nothing_answers_at(tmp_path):
    # ray.init waited there for minutes, deaf to Ctrl-C, and left a run folder behind.
    command = [sys.executable, "-m", "batchrl.scripts.train", "--config", "pendulum"]
    command += ["--logdir", str(tmp_path), "--set", "backend=ray", "steps=1000", "num_envs=2"]
    with closed_port() as port:
        env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("batchrl: error: cannot reach the Ray cluster at RAY_ADDRESS")
    assert len(result.stderr.splitlines()) == 1 and not any(tmp_path.iterdir())


@contextlib.contextmanager
def web_server(dashboard: bool) -> Iterator[str]:
    """The address of a web server: Python's own, or one answering as Ray's dashboard does."""

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def handle(self) -> None:  # aiohttp's answer to HTTP/2's opening, which it reads.
            self.request.recv(64)
            self.request.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    handler = Dashboard if dashboard else http.server.SimpleHTTPRequestHandler
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as web:
        threading.Thread(target=web.serve_forever, daemon=True).start()
        try:
            yield f"127.0.0.1:{web.server_address[1]}"
        finally:
            web.shutdown()


@pytest.mark.parametrize("dashboard", [True, False], ids=["dashboard", "python"])
def test_an_address_that_answers_as_a_web_server_is_one_line(dashboard):
    # A dashboard's port given as HOST:PORT (8265, what `ray job submit` reads): ray.init
    # waited on it for minutes, deaf to Ctrl-C. Python's server answers HTTP/2's opening
    # with a bare HTML page, a status line being HTTP/1.0's.
    with web_server(dashboard) as address, pytest.raises(ValueError) as error:
        starting.reach(address)
    assert str(error.value) == (
        f"RAY_ADDRESS={address!r} answers as a web server (a dashboard's port?), not as a Ray "
        "cluster: give the cluster's head as HOST:6379 (ray://HOST:10001 for Ray Client)"
    )


@pytest.mark.xdist_group("ray")
@pytest.mark.slow
def test_a_clusters_head_answers_as_one(cluster):
    starting.reach(cluster.address)  # Its GCS answers HTTP/2's opening with a frame.


@pytest.mark.parametrize("auth_mode", ["", "token"])
def test_a_refused_connection_says_what_to_check_by_whether_a_token_is_set(monkeypatch, auth_mode):
    # With RAY_AUTH_MODE set it still said to set it: the token or the port was wrong.
    def refused(ray, **options):
        raise ConnectionError("Failed to connect to GCS: Unauthenticated\nmore of Ray's text")

    monkeypatch.setattr(starting, "_init", refused)
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    if auth_mode:
        monkeypatch.setenv("RAY_AUTH_MODE", auth_mode)
    else:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(ValueError) as error:
        starting.init(None)
    said = str(error.value)
    assert said.startswith("Ray refused to connect to the cluster at RAY_ADDRESS='auto' (Failed")
    if auth_mode:
        assert "must be the cluster's, and the address its head's HOST:6379" in said
    else:
        assert "started with RAY_AUTH_MODE=token needs it set here too" in said


def test_auto_with_no_cluster_running_is_told_so_not_of_a_token(monkeypatch):
    # "Ray refused to connect ... needs RAY_AUTH_MODE=token": nothing had refused anything.
    def none_runs(ray, **options):  # Ray 2.60's words for RAY_ADDRESS=auto with no cluster.
        raise ConnectionError(
            "Could not find any running Ray instance. Please specify the one to connect to by "
            "setting `--address` flag or `RAY_ADDRESS` environment variable."
        )

    monkeypatch.setattr(starting, "_init", none_runs)
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(ValueError) as error:
        starting.init(None)
    assert str(error.value) == (
        "no Ray cluster runs on this machine for RAY_ADDRESS='auto' to join: start one (ray "
        "start --head), name its head as HOST:6379, or unset RAY_ADDRESS to start Ray in this "
        "process (docs/cluster.md)"
    )


@pytest.mark.parametrize(("actors", "fewest"), [(2, 2), (None, 5)])
def test_a_bad_local_envs_is_refused_before_ray_is_reached(monkeypatch, actors, fewest):
    # Ray started (seconds), or RAY_ADDRESS was reached, before the argument was read.
    from batchrl.envs import BatchEnv

    with closed_port() as port:
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        words = rf"^local_envs applies per actor: .* from 0 to {fewest} .*, got 6$"
        with pytest.raises(ValueError, match=words):
            BatchEnv.ray("Pendulum-v1", 5, actors=actors, local_envs=6)

"""Starts the built `nereid` binary once per test session on free loopback
ports, serving model_repository/ and tests/models/, and hands tests its
addresses. The binary comes from $NEREID_BIN (default target/debug/nereid)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
# Bounds on waits for events, not expected durations: a debug build with
# many models, on a busy 2-core machine, can take a minute or more to start
# or to answer a health check, and a wait that ends early fails a test that
# had nothing wrong. Each wait returns as soon as its event comes.
START_S = 300
STOP_S = 120
WAIT_S = 60


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` ports free now, all different: each is held until all are
    chosen, so the OS cannot hand out one of them twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Server:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def base(self) -> str:
        return f"http://{self.http_url}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def plain_http_ready(server: Server) -> bool:
    return requests.get(f"{server.base}/v2/health/ready", timeout=10).status_code == 200


def live(server: Server) -> bool:
    """For a server that may start not ready: its HTTP endpoint answers."""
    return requests.get(f"{server.base}/v2/health/live", timeout=10).status_code == 200


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S,
               interval_s: float = 0.05):
    """Polls `condition` until it gives a true value, which it returns;
    fails naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(interval_s)


def start_server(tmp_path: Path, repositories: list[Path], extra: list[str] | None = None,
                 ready: Callable[[Server], bool] = plain_http_ready) -> Server:
    """Starts nereid and waits until `ready` (by default: plain HTTP
    readiness) holds; a check that cannot connect or gets no answer in
    time counts as not ready yet."""
    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    extra = list(extra or [])
    if not any("python-path=" in arg for arg in extra):
        # Python models (model_repository/ has one) run on the tests' venv,
        # which has numpy.
        extra.append(f"--backend-config=python,python-path={sys.executable}")
    ports = free_ports(3)
    log_path = tmp_path / "nereid.log"
    args = [binary]
    for repo in repositories:
        args += ["--model-repository", str(repo)]
    args += [
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        f"--http-port={ports[0]}",
        f"--grpc-port={ports[1]}",
        f"--metrics-port={ports[2]}",
        *(extra or []),
    ]
    log = open(log_path, "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    server = Server(process, *ports, log_path)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nereid exited with {process.returncode}:\n{server.log()}")
        try:
            if ready(server):
                return server
        except requests.RequestException:
            pass
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"nereid did not become ready in {START_S} s:\n{server.log()}")


def stop_server(server: Server) -> int:
    server.process.terminate()
    try:
        return server.process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    tmp = tmp_path_factory.mktemp("nereid")
    s = start_server(tmp, [REPO_ROOT / "model_repository", REPO_ROOT / "tests" / "models"])
    yield s
    code = stop_server(s)
    assert code == 0, f"nereid exited with {code}:\n{s.log()}"

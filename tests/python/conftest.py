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
    return requests.get(f"{server.base}/v2/health/ready", timeout=1).status_code == 200


def start_server(tmp_path: Path, repositories: list[Path], extra: list[str] | None = None,
                 ready: Callable[[Server], bool] = plain_http_ready) -> Server:
    """Starts nereid and waits until `ready` (by default: plain HTTP
    readiness) holds."""
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nereid exited with {process.returncode}:\n{server.log()}")
        try:
            if ready(server):
                return server
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"nereid did not become ready:\n{server.log()}")


def stop_server(server: Server) -> int:
    server.process.terminate()
    try:
        return server.process.wait(timeout=30)
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

"""What a user sees when the server cannot start: one line on stderr,
`error: ` then the reason and its causes joined with ": " (a port in use
names its address and the flags that set it), and exit status 1; a
backtrace only when RUST_BACKTRACE asks for one, before that line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, START_S, free_ports

BINARY = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))


def start(tmp_path, args, backtrace=None):
    """Runs nereid until it exits (it must not start); its exit status and
    stderr lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
    if backtrace is not None:
        env["RUST_BACKTRACE"] = backtrace
    http, grpc, metrics, openai = free_ports(4)
    defaults = [
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
        f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}",
        "--openai-address=127.0.0.1", f"--openai-port={openai}",
    ]
    repository = tmp_path / "models"
    repository.mkdir(exist_ok=True)
    defaults.append(f"--model-repository={repository}")
    # A flag the test gives replaces the default one.
    given = {arg.split("=")[0] for arg in args}
    defaults = [arg for arg in defaults if arg.split("=")[0] not in given]
    done = subprocess.run([BINARY, *defaults, *args], env=env, capture_output=True, text=True,
                          timeout=START_S)
    return done.returncode, done.stderr.splitlines()


ENDPOINTS = [
    ("--http-port", "HTTP", "--http-port, --http-address"),
    ("--grpc-port", "gRPC", "--grpc-port, --grpc-address"),
    ("--metrics-port", "metrics", "--metrics-port, --metrics-address"),
    ("--openai-port", "OpenAI", "--openai-port, --openai-address"),
]


@pytest.mark.parametrize("flag, endpoint, flags", ENDPOINTS)
def test_a_port_in_use_is_one_line_naming_the_address_and_its_flags(tmp_path, flag, endpoint, flags):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = start(tmp_path, [f"{flag}={port}"])
    assert code == 1
    assert lines == [
        f"error: cannot bind the {endpoint} endpoint to 127.0.0.1:{port} (set by {flags}): "
        "Address already in use (os error 98)"
    ]


def test_a_backtrace_comes_only_when_asked_for(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        quiet = start(tmp_path, [f"--http-port={port}"], backtrace="0")
        traced = start(tmp_path, [f"--http-port={port}"], backtrace="1")
    assert quiet[0] == traced[0] == 1
    assert len(quiet[1]) == 1
    assert len(traced[1]) > 1
    assert traced[1][-1] == quiet[1][0]


def broken_python_model(tmp_path):
    model = tmp_path / "broken"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    (model / "1" / "model.py").write_text("import nereid_no_such_module\n")
    return [f"--model-repository={tmp_path}", "--exit-on-error=true",
            f"--backend-config=python,python-path={sys.executable}"]


@pytest.mark.parametrize("case", ["repository", "tls", "cache", "log_file", "model"])
def test_every_startup_error_is_one_line(tmp_path, case):
    args, expected = {
        "repository": (["--model-repository=/nereid/no/such/repository"],
                       "error: --model-repository /nereid/no/such/repository is not a folder"),
        "tls": (["--http-use-ssl=true", f"--http-server-cert={tmp_path}/none.pem",
                 f"--http-server-key={tmp_path}/none.key"],
                f"error: --http-server-cert {tmp_path}/none.pem: cannot read it: "
                "No such file or directory (os error 2)"),
        "cache": (["--cache-config=local,size=abc"],
                  "error: --cache-config local,size=abc: size must be a number of bytes"),
        "log_file": ([f"--log-file={tmp_path}/none/nereid.log"],
                     f"error: cannot open --log-file {tmp_path}/none/nereid.log: "
                     "No such file or directory (os error 2)"),
        "model": (broken_python_model(tmp_path / "repository"),
                  "error: failed to load all models: 'broken': failed to load 'broken', failed to "
                  "poll from model repository: ModuleNotFoundError: No module named "
                  "'nereid_no_such_module'"),
    }[case]
    code, lines = start(tmp_path, args)
    assert (code, lines) == (1, [expected])

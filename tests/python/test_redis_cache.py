"""The Redis response cache (`--cache-config redis,host=H`,
`--cache-config redis,port=P`), against a real redis-server (Debian's,
which scripts/setup-redis.sh installs) started here on a free loopback port
without persistence: two servers share it (a miss on one is a hit on the
other), with Triton's statistics and metrics; a Redis that stops mid-run
turns lookups into misses, counted in `nereid_cache_errors_total`, and
every request still succeeds; once Redis is back, hits resume. A server
whose Redis cannot be reached does not start, as tritonserver."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from calls import infer, model_stats
from conftest import REPO_ROOT, START_S, free_port, free_ports, start_server, stop_server
from test_response_cache import COUNTER, config

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (scripts/setup-redis.sh)")


class Redis:
    """A redis-server of the test's own, which can be stopped and started
    again on the same port."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.tmp = tmp
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def flags(self) -> list[str]:
        return ["--cache-config=redis,host=127.0.0.1", f"--cache-config=redis,port={self.port}"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A Redis and two servers that use it, each serving the 'cached' model."""
    tmp = tmp_path_factory.mktemp("redis")
    redis = Redis(tmp)
    redis.start()
    repo = tmp / "repo"
    (repo / "cached" / "1").mkdir(parents=True)
    (repo / "cached" / "1" / "model.py").write_text(COUNTER)
    (repo / "cached" / "config.pbtxt").write_text(config(True))
    servers = []
    try:
        for name in ("a", "b"):
            (tmp / name).mkdir()
            servers.append(start_server(tmp / name, [repo], [
                *redis.flags(), f"--backend-config=python,python-path={sys.executable}"]))
        yield redis, servers[0], servers[1]
    finally:
        for server in servers:
            assert stop_server(server) == 0, server.log()
        redis.stop()


def call(server, values, protocol="grpc"):
    x = np.array(values, dtype=np.float32)
    return infer(server, protocol, "cached", [("IN", x, "FP32")]).outputs["OUT"].tolist()


def counts(server):
    s = model_stats(server, "cached")
    i = s["inference_stats"]
    return {"hit": int(i["cache_hit"]["count"]), "miss": int(i["cache_miss"]["count"]),
            "executions": int(s["execution_count"])}


def metrics(server) -> dict:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def errors(server) -> dict:
    return {s.labels["operation"]: s.value for s in metrics(server)["nereid_cache_errors"].samples
            if s.name == "nereid_cache_errors_total"}


def connected(server) -> float:
    return metrics(server)["nereid_cache_connected"].samples[0].value


def test_a_miss_on_one_server_is_a_hit_on_the_other(shared):
    _, a, b = shared
    assert call(a, [9]) == [10]
    # A's second execution: B running the model itself would answer [2, 3].
    assert call(a, [1, 2], "http-binary") == [3, 4]
    assert call(b, [1, 2]) == [3, 4], "A's answer, from Redis"
    assert call(b, [1, 2], "http-json") == [3, 4]
    assert counts(a) == {"hit": 0, "miss": 2, "executions": 2}
    assert counts(b) == {"hit": 2, "miss": 0, "executions": 0}
    stats = model_stats(b, "cached")["inference_stats"]
    assert int(stats["cache_hit"]["ns"]) > 0
    families = metrics(b)
    hits = {s.labels["model"]: s.value for s in families["nv_cache_num_hits_per_model"].samples}
    assert hits == {"cached": 2}, hits
    assert "nv_cache_hit_duration_per_model" in families
    assert "nv_cache_util" not in families, "Redis's size is Redis's to report"
    assert connected(b) == 1
    assert errors(b) == {"get": 0, "set": 0, "connect": 0}


def test_a_redis_that_stops_is_a_miss_and_hits_resume_once_it_is_back(shared):
    redis, a, b = shared
    before = counts(a)
    redis.stop()
    # Every request succeeds; the model answers each.
    answers = [call(a, [100]) for _ in range(3)]
    call(b, [100])
    assert answers == [[100 + before["executions"] + n] for n in (1, 2, 3)], answers
    after = counts(a)
    assert after["miss"] - before["miss"] == 3 and after["hit"] == before["hit"]
    assert sum(errors(a).values()) >= 1, errors(a)
    assert connected(a) == 0
    assert "the Redis response cache failed" in a.log()
    redis.start()
    # Each server connects again, waiting longer after each failure.
    deadline = time.monotonic() + 120
    while connected(a) != 1 or connected(b) != 1:
        assert time.monotonic() < deadline, (a.log()[-2000:], errors(a))
        time.sleep(0.1)
    assert "the Redis response cache works again" in a.log()
    first = call(a, [300])
    assert call(b, [300]) == first, "B's hit on A's answer"
    assert counts(b)["hit"] >= 1


def test_a_server_whose_redis_cannot_be_reached_does_not_start(tmp_path):
    port, http, grpc, metrics = free_ports(4)
    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    run = subprocess.run([binary, "--model-repository", str(REPO_ROOT / "model_repository"),
                          "--cache-config=redis,host=127.0.0.1", f"--cache-config=redis,port={port}",
                          f"--http-port={http}", f"--grpc-port={grpc}",
                          f"--metrics-port={metrics}"],
                         capture_output=True, text=True, timeout=START_S)
    assert run.returncode != 0
    assert f"failed to connect to Redis (127.0.0.1:{port})" in run.stderr + run.stdout, run.stderr

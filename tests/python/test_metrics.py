"""The metrics port, read with Prometheus's own text parser: Triton's
metric names, types and labels, counts that move with inferences against
`model_repository/simple`, the pending-request gauge, the CPU gauges, and
`--metrics-config` (summary_latencies, counter_latencies,
histogram_latencies, histogram_buckets)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server, wait_until

COUNTERS = [
    "nv_inference_request_success",
    "nv_inference_count",
    "nv_inference_exec_count",
]
LATENCY_COUNTERS = [
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
]
SUMMARIES = [
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
]
HISTOGRAMS = [
    "nv_inference_request_histogram_ms",
    "nv_inference_queue_histogram_ms",
    "nv_inference_compute_input_histogram_ms",
    "nv_inference_compute_infer_histogram_ms",
    "nv_inference_compute_output_histogram_ms",
]
CPU_GAUGES = ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]
TRITON_QUANTILES = {"0.5", "0.9", "0.95", "0.99", "0.999"}
SIMPLE = {"model": "simple", "version": "1"}
FAILURE = "nv_inference_request_failure"
REASONS = ["REJECTED", "CANCELED", "BACKEND", "OTHER"]


def repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "simple").symlink_to(REPO_ROOT / "model_repository" / "simple")
    return repo


def scrape(server) -> dict:
    """Metric families by name, parsed by prometheus_client."""
    r = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30)
    r.raise_for_status()
    assert r.headers["content-type"].startswith("text/plain")
    # Triton's names, as written: no `_total` added to counters.
    assert "nv_inference_request_success{" in r.text and "_success_total" not in r.text
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(families: dict, name: str, labels: dict | None = None, sample: str | None = None) -> float:
    """The one sample of `name` (or `sample`) carrying `labels`. The parser
    names a counter's samples `<name>_total` whether the text has the suffix
    or not (Triton's have none, nor have Nereid's)."""
    names = {sample} if sample else {name, f"{name}_total"}
    found = [s.value for s in families[name].samples
             if s.name in names and all(s.labels.get(k) == v
                                        for k, v in (labels or {}).items())]
    assert len(found) == 1, (name, labels, families[name].samples)
    return found[0]


def infer_simple(server, n: int) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(n):
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(data)
        client.infer("simple", inputs)


def infer_badly(server) -> None:
    """A request the model refuses (wrong shape): a failed request."""
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput(name, [1, 15], "INT32") for name in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.zeros((1, 15), dtype=np.int32))
    with pytest.raises(InferenceServerException):
        client.infer("simple", inputs)


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics-default")
    s = start_server(tmp, [repository(tmp)], ["--metrics-interval-ms=200"])
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.fixture(scope="module")
def summary_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics-summary")
    s = start_server(tmp, [repository(tmp)],
                     ["--metrics-config", "summary_latencies=true",
                      "--metrics-config=counter_latencies=false",
                      "--allow-cpu-metrics=false"])
    yield s
    assert stop_server(s) == 0, s.log()


def test_tritons_families_have_their_types_and_labels(default_server):
    families = scrape(default_server)
    for name in COUNTERS + LATENCY_COUNTERS:
        assert families[name].type == "counter", name
        value(families, name, SIMPLE)
    assert families[FAILURE].type == "counter"
    for reason in REASONS:
        value(families, FAILURE, {**SIMPLE, "reason": reason})
    pending = families["nv_inference_pending_request_count"]
    assert pending.type == "gauge"
    assert value(families, "nv_inference_pending_request_count", SIMPLE) == 0
    for name in SUMMARIES:
        assert name not in families, "summaries are off by default, as in Triton"
    for name in HISTOGRAMS:
        assert name not in families, "histograms are off by default, as in Triton"
    for family in families.values():
        for sample in family.samples:
            if family.name.startswith("nv_inference"):
                assert set(sample.labels) >= {"model", "version"}, sample


def test_counts_move_with_inferences(default_server):
    before = scrape(default_server)
    infer_simple(default_server, 5)
    infer_badly(default_server)
    after = scrape(default_server)

    def moved(name):
        return value(after, name, SIMPLE) - value(before, name, SIMPLE)

    assert moved("nv_inference_request_success") == 5
    other = {**SIMPLE, "reason": "OTHER"}
    assert value(after, FAILURE, other) - value(before, FAILURE, other) == 1
    for reason in ["REJECTED", "CANCELED", "BACKEND"]:
        labels = {**SIMPLE, "reason": reason}
        assert value(after, FAILURE, labels) == value(before, FAILURE, labels)
    assert moved("nv_inference_count") == 5
    assert 1 <= moved("nv_inference_exec_count") <= 5
    assert moved("nv_inference_request_duration_us") > 0
    assert moved("nv_inference_compute_infer_duration_us") > 0
    assert value(after, "nv_inference_pending_request_count", SIMPLE) == 0


def test_cpu_gauges_read_the_machine(default_server):
    families = scrape(default_server)
    for name in CPU_GAUGES:
        assert families[name].type == "gauge", name
        assert families[name].samples[0].labels == {}
    assert 0.0 <= value(families, "nv_cpu_utilization") <= 1.0
    total = value(families, "nv_cpu_memory_total_bytes")
    used = value(families, "nv_cpu_memory_used_bytes")
    assert 0 < used <= total


def test_summaries_when_asked_for(summary_server):
    infer_simple(summary_server, 4)
    families = scrape(summary_server)
    for name in SUMMARIES:
        family = families[name]
        assert family.type == "summary", name
        quantiles = {s.labels["quantile"] for s in family.samples if s.name == name}
        assert quantiles == TRITON_QUANTILES, (name, quantiles)
        assert value(families, name, SIMPLE, sample=f"{name}_count") == 4
        assert value(families, name, SIMPLE, sample=f"{name}_sum") > 0 or "queue" in name
        assert value(families, name, {**SIMPLE, "quantile": "0.5"}) >= 0
    infer_simple(summary_server, 2)
    again = scrape(summary_server)
    count = "nv_inference_request_summary_us_count"
    assert value(again, "nv_inference_request_summary_us", SIMPLE, sample=count) == 6


def test_counter_latencies_false_drops_the_duration_counters(summary_server):
    families = scrape(summary_server)
    for name in LATENCY_COUNTERS:
        assert name not in families, name
    for name in COUNTERS:
        value(families, name, SIMPLE)
    value(families, FAILURE, {**SIMPLE, "reason": "OTHER"})


def test_histograms_when_asked_for(tmp_path):
    """Cumulative buckets at the bounds asked for, ending at +Inf with
    the count, which is the success counter's; the counters stay."""
    s = start_server(tmp_path, [repository(tmp_path)],
                     ["--metrics-config=histogram_latencies=true",
                      "--metrics-config=histogram_buckets=0.05,1,20000"])
    try:
        infer_simple(s, 3)
        families = scrape(s)
        for name in HISTOGRAMS:
            family = families[name]
            assert family.type == "histogram", name
            buckets = [(b.labels["le"], b.value) for b in family.samples
                       if b.name == f"{name}_bucket" and b.labels["model"] == "simple"]
            assert [le for le, _ in buckets] == ["0.05", "1", "20000", "+Inf"], buckets
            counts = [count for _, count in buckets]
            assert counts == sorted(counts) and counts[-1] == 3, (name, buckets)
            assert value(families, name, SIMPLE, sample=f"{name}_count") == 3
            total_ms = value(families, name, SIMPLE, sample=f"{name}_sum")
            assert 0 <= total_ms < 3 * 20000
        assert value(families, "nv_inference_request_success", SIMPLE) == 3
        assert value(families, "nv_inference_request_histogram_ms", {**SIMPLE, "le": "+Inf"},
                     sample="nv_inference_request_histogram_ms_bucket") == 3
        value(families, "nv_inference_request_duration_us", SIMPLE)
    finally:
        assert stop_server(s) == 0, s.log()


def test_allow_cpu_metrics_false_drops_the_cpu_gauges(summary_server):
    families = scrape(summary_server)
    for name in CPU_GAUGES:
        assert name not in families, name


# Holds each execution until the test creates the file GATE.
SLOW_MODEL = """
import os
import time
import triton_python_backend_utils as pb_utils

GATE = {gate!r}


class TritonPythonModel:
    def execute(self, requests):
        deadline = time.monotonic() + 600
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""
SLOW_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""


def test_pending_requests_are_counted_while_they_wait(tmp_path):
    """One instance held until the test lets it go, and four requests at
    once: while the first runs, the other three are pending; afterwards
    none is."""
    repo = tmp_path / "repo"
    gate = tmp_path / "gate"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "1" / "model.py").write_text(SLOW_MODEL.format(gate=str(gate)))
    (repo / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    s = start_server(tmp_path, [repo], [f"--backend-config=python,python-path={sys.executable}"])
    try:
        def one():
            client = httpclient.InferenceServerClient(s.http_url, network_timeout=300)
            i = httpclient.InferInput("IN", [1], "FP32")
            i.set_data_from_numpy(np.ones(1, dtype=np.float32))
            client.infer("slow", [i])

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        labels = {"model": "slow", "version": "1"}
        try:
            wait_until(lambda: value(scrape(s), "nv_inference_pending_request_count", labels) == 3,
                       "three requests pending behind the running one")
        finally:
            gate.touch()
        for t in threads:
            t.join()
        after = scrape(s)
        assert value(after, "nv_inference_pending_request_count", labels) == 0
        assert value(after, "nv_inference_request_success", labels) == 4
    finally:
        assert stop_server(s) == 0, s.log()


FAILING_MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("this model always fails")
"""


def test_a_backend_failure_is_counted_under_backend(tmp_path):
    repo = tmp_path / "repo"
    (repo / "fails" / "1").mkdir(parents=True)
    (repo / "fails" / "1" / "model.py").write_text(FAILING_MODEL)
    (repo / "fails" / "config.pbtxt").write_text(SLOW_CONFIG)
    s = start_server(tmp_path, [repo], [f"--backend-config=python,python-path={sys.executable}"])
    try:
        client = httpclient.InferenceServerClient(s.http_url)
        i = httpclient.InferInput("IN", [1], "FP32")
        i.set_data_from_numpy(np.ones(1, dtype=np.float32))
        with pytest.raises(InferenceServerException):
            client.infer("fails", [i])
        families = scrape(s)
        labels = {"model": "fails", "version": "1"}
        assert value(families, FAILURE, {**labels, "reason": "BACKEND"}) == 1
        assert value(families, FAILURE, {**labels, "reason": "OTHER"}) == 0
    finally:
        assert stop_server(s) == 0, s.log()


@pytest.mark.parametrize("setting", ["summary_latencies=maybe", "histogram_buckets=5,1"])
def test_bad_metrics_config_stops_startup(tmp_path, setting):
    with pytest.raises(RuntimeError) as e:
        start_server(tmp_path, [repository(tmp_path)], [f"--metrics-config={setting}"])
    assert setting in str(e.value)

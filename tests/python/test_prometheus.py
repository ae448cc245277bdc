"""A real Prometheus (Debian's, installed by scripts/setup-prometheus.sh)
scrapes a running Nereid while perf_analyzer loads it, then answers the
queries the deployment relies on through its HTTP API: the autoscaler's
queue-time rule from deploy/helm/prometheus-adapter-values.yaml, as prometheus-adapter
would send it, and a p99 from the latency histograms, which must agree
with perf_analyzer's own p99 within 20%. The dashboard's queries must run
too."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from conftest import REPO_ROOT, free_port, start_server, stop_server

PERF_ANALYZER = REPO_ROOT / ".tools" / "perf_analyzer" / "perf_analyzer.sh"
CHART = REPO_ROOT / "deploy" / "helm" / "nereid"
LABELS = {"namespace": "test", "pod": "nereid-0"}

# One instance that takes 8 ms per request, loaded by 4 clients at once:
# each request waits for about three others, so queue time dominates, and
# a request lasts tens of milliseconds, against which the client's own
# overhead is small.
SLEEPY_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(0.008)
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return responses
"""
SLEEPY_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""
CONCURRENCY = 4

# Buckets 10% apart from 1 ms to 2 s: histogram_quantile interpolates
# within one bucket, so this bounds its error well inside 20%.
BUCKETS = [round(1.1 ** i, 3) for i in range(81)]


def need(tool: Path | str | None, setup: str) -> None:
    if not tool or not Path(tool).exists():
        pytest.skip(f"{setup} has not been run (make setup-test does)")


class Prometheus:
    def __init__(self, tmp: Path, target: str):
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": "nereid",
                "static_configs": [{"targets": [target], "labels": LABELS}],
            }],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = tmp / "prometheus.log"
        self.process = subprocess.Popen(
            [shutil.which("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.until(lambda: self.query('up{job="nereid"}') == [1.0], "scraping nereid")

    def until(self, check, what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log.read_text()}")
            try:
                if check():
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus never got to {what}:\n{self.log.read_text()}")

    def api(self, path: str, **params) -> dict:
        r = requests.get(f"http://127.0.0.1:{self.port}/api/v1/{path}", params=params, timeout=30)
        body = r.json()
        assert body["status"] == "success", (params, body)
        return body["data"]

    def query(self, promql: str) -> list[float]:
        """The instant vector's values."""
        return [float(s["value"][1]) for s in self.api("query", query=promql)["result"]]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def scrape_total(metrics_port: int, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
    [line] = [l for l in text.splitlines() if l.startswith(f'{name}{{model="sleepy"')]
    return float(line.rsplit(" ", 1)[1])


def perf_analyzer(http_port: int, csv_path: Path) -> dict:
    """Runs perf_analyzer at CONCURRENCY and returns its CSV row."""
    args = ["timeout", "180", str(PERF_ANALYZER), "-m", "sleepy", "-i", "http",
            "-u", f"127.0.0.1:{http_port}", "--concurrency-range", str(CONCURRENCY),
            "--measurement-interval", "3000", "-s", "50", "-r", "6", "-f", str(csv_path)]
    run = subprocess.run(args, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    with open(csv_path) as f:
        return next(csv.DictReader(f))


def adapter_query(rule: dict) -> str:
    """The PromQL prometheus-adapter sends for one pod."""
    matchers = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
    return rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod")


def within(measured: float, expected: float, share: float) -> bool:
    return abs(measured - expected) <= share * expected


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Nereid with histograms, scraped by Prometheus, after a perf_analyzer
    run: (prometheus, perf_analyzer's row, the load's seconds, the
    server's own queue time per request over the run)."""
    need(shutil.which("prometheus"), "scripts/setup-prometheus.sh")
    need(PERF_ANALYZER, "scripts/setup-perf-analyzer.sh")
    tmp = tmp_path_factory.mktemp("prometheus")
    repo = tmp / "repo"
    (repo / "sleepy" / "1").mkdir(parents=True)
    (repo / "sleepy" / "1" / "model.py").write_text(SLEEPY_MODEL)
    (repo / "sleepy" / "config.pbtxt").write_text(SLEEPY_CONFIG)
    server = start_server(tmp, [repo], [
        "--metrics-config=histogram_latencies=true",
        "--metrics-config=histogram_buckets=" + ",".join(map(str, BUCKETS)),
        f"--backend-config=python,python-path={sys.executable}"])
    prometheus = None
    try:
        prometheus = Prometheus(tmp, f"127.0.0.1:{server.metrics_port}")
        before = {n: scrape_total(server.metrics_port, n)
                  for n in ("nv_inference_queue_duration_us", "nv_inference_request_success")}
        started = time.time()
        row = perf_analyzer(server.http_port, tmp / "perf.csv")
        after = {n: scrape_total(server.metrics_port, n) for n in before}
        ended = time.time()
        # Two scrapes after the load, so that Prometheus has its end.
        prometheus.until(lambda: prometheus.query(
            'nv_inference_request_success{model="sleepy"}') == [after["nv_inference_request_success"]],
            "the last count")
        queue_per_request = ((after["nv_inference_queue_duration_us"] - before["nv_inference_queue_duration_us"])
                             / (after["nv_inference_request_success"] - before["nv_inference_request_success"]))
        yield prometheus, row, ended - started, queue_per_request
    finally:
        if prometheus:
            prometheus.stop()
        assert stop_server(server) == 0, server.log()


def test_histogram_p99_agrees_with_perf_analyzer(loaded):
    prometheus, row, seconds, _ = loaded
    window = f"{int(seconds) + 5}s"
    [p99_ms] = prometheus.query(
        'histogram_quantile(0.99, sum by (le) (increase('
        f'nv_inference_request_histogram_ms_bucket{{model="sleepy"}}[{window}])))')
    client_p99_ms = float(row["p99 latency"]) / 1000
    print(f"p99: histograms {p99_ms:.2f} ms, perf_analyzer {client_p99_ms:.2f} ms "
          f"({(p99_ms / client_p99_ms - 1) * 100:+.1f}%)")
    assert within(p99_ms, client_p99_ms, 0.20), (p99_ms, client_p99_ms)
    # The queue histogram says the same as the counters: requests wait.
    [queue_p50_ms] = prometheus.query(
        'histogram_quantile(0.5, sum by (le) (increase('
        f'nv_inference_queue_histogram_ms_bucket{{model="sleepy"}}[{window}])))')
    assert queue_p50_ms > 8


def test_the_autoscalers_rule_gives_queue_time_per_request(loaded):
    prometheus, row, _, queue_per_request = loaded
    adapter = yaml.safe_load((CHART.parent / "prometheus-adapter-values.yaml").read_text())
    rules = {r["name"]["as"]: r for r in adapter["rules"]["custom"]}
    metric = yaml.safe_load((CHART / "values.yaml").read_text())["autoscaling"]["queueTime"]["metric"]
    rule = rules[metric]
    series = prometheus.api("series", **{"match[]": rule["seriesQuery"]})
    assert series and all(s["namespace"] == "test" and s["pod"] == "nereid-0" for s in series)
    result = prometheus.api("query", query=adapter_query(rule))["result"]
    assert [r["metric"] for r in result] == [{"pod": "nereid-0"}], result
    hpa_us = float(result[0]["value"][1])
    server_queue_us = float(row["Server Queue"])
    print(f"avg_time_queue_us: {hpa_us:.0f}; the counters over the run {queue_per_request:.0f}; "
          f"perf_analyzer's server queue {server_queue_us:.0f}")
    # About three 8 ms requests ahead of each.
    assert hpa_us > 8000
    assert within(hpa_us, queue_per_request, 0.20)
    assert within(hpa_us, server_queue_us, 0.20)
    # The GPU rule runs too (no series on a machine without GPUs).
    prometheus.api("query", query=adapter_query(rules["gpu_utilization"]))


def test_the_dashboards_queries_run(loaded):
    prometheus, *_ = loaded
    dashboard = json.loads((CHART / "dashboards" / "nereid.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$namespace", ".*").replace("$model", ".*")
                    .replace("$__rate_interval", "1m"))
            values = prometheus.query(expr)
            if "gpu" not in expr and "failure" not in expr:
                assert values, (panel["title"], expr)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            label = query.split(", ")[-1].rstrip(")")
            metric = query[len("label_values("):query.rindex(",")].replace("$namespace", ".*")
            found = prometheus.api(f"label/{label}/values", **{"match[]": metric})
            assert found, query

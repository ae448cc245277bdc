"""A Python model's calls to the server, end to end: custom metrics
(`pb_utils.MetricFamily`) on the metrics port, the model loading API
(`pb_utils.load_model`, `unload_model`, `is_model_ready`), and
`request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`.

The models under tests/python/server_calls/ run the code a request sends,
so each check is the same code the tests ran against real Triton 2.51's
Python backend, whose answers (messages, /metrics lines) they expect. To
run them there, start Triton on a copy of tests/python/server_calls twice
(without broken/ and self_loader/; and with `--model-control-mode=explicit
--load-model=probe`) and set SERVER_CALLS_PLAIN and SERVER_CALLS_EXPLICIT
to host:http_port:metrics_port; the checks of what Nereid does differently
are skipped then."""

from __future__ import annotations

import json
import os
import queue
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server, wait_until

MODELS = REPO_ROOT / "tests/python/server_calls"


def repository(tmp_path_factory, name):
    tmp = tmp_path_factory.mktemp(name)
    repo = tmp / "models"
    shutil.copytree(MODELS, repo)
    return tmp, repo


@dataclass
class External:
    """A server the tests did not start (real Triton)."""

    http_url: str
    metrics_port: int
    grpc_url: str = ""

    @property
    def base(self):
        return f"http://{self.http_url}"


def external(variable):
    if variable not in os.environ:
        return None
    host, http_port, metrics_port = os.environ[variable].split(":")
    return External(f"{host}:{http_port}", int(metrics_port))


def nereid_only(server):
    if isinstance(server, External):
        pytest.skip("Nereid differs from Triton here (see the test's docstring)")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Model control mode none: every model but the broken one loads."""
    if external("SERVER_CALLS_PLAIN"):
        yield external("SERVER_CALLS_PLAIN")
        return
    tmp, repo = repository(tmp_path_factory, "plain")
    shutil.rmtree(repo / "broken")
    shutil.rmtree(repo / "self_loader")
    server = start_server(tmp, [repo])
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    if external("SERVER_CALLS_EXPLICIT"):
        yield external("SERVER_CALLS_EXPLICIT")
        return
    tmp, repo = repository(tmp_path_factory, "explicit")
    server = start_server(tmp, [repo], ["--model-control-mode=explicit", "--load-model=probe"])
    yield server
    stop_server(server)


def run(server, code, model="probe"):
    """What the model answered to `code`: repr(result) or "EXC ..."."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    cmd = httpclient.InferInput("CMD", [1], "BYTES")
    cmd.set_data_from_numpy(np.array([code.encode()], dtype=np.object_))
    return client.infer(model, [cmd]).as_numpy("OUT")[0].decode()


def scrape(server):
    return requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text


def custom_lines(text, name):
    return [line for line in text.splitlines() if name in line]


def failure(prefix, message, instance="probe_0_0"):
    return (f"EXC TritonModelException: {prefix}: Failed to process "
            f"the request for model '{instance}', message: {message}")


# Custom metrics ----------------------------------------------------------------


def test_counters_gauges_and_histograms_appear_as_triton_shows_them(plain):
    assert run(plain, """
fam = pb_utils.MetricFamily(name="e2e_counter", description="a counter", kind=pb_utils.MetricFamily.COUNTER)
m = fam.Metric(labels={"b": "2", "a": 'q"u\\\\o'})
m.increment(0.1); m.increment(0.2)
g = pb_utils.MetricFamily("e2e_gauge", "a gauge", pb_utils.MetricFamily.GAUGE)
gm = g.Metric()
gm.increment(5); gm.increment(-7.5)
first = gm.value()
gm.set(1e21)
h = pb_utils.MetricFamily("e2e_hist", "a histogram", pb_utils.MetricFamily.HISTOGRAM)
hm = h.Metric(labels={"x": "y"}, buckets=[0.1, 1, 2.5])
for v in (0.05, 1.5, 6.0, 0.1): hm.observe(v)
result = m.value(), first, gm.value()
""") == "(0.30000000000000004, -2.5, 1e+21)"
    text = scrape(plain)
    assert custom_lines(text, "e2e_counter") == [
        "# HELP e2e_counter a counter",
        "# TYPE e2e_counter counter",
        'e2e_counter{a="q\\"u\\\\o",b="2"} 0.3',
    ]
    assert custom_lines(text, "e2e_gauge") == [
        "# HELP e2e_gauge a gauge", "# TYPE e2e_gauge gauge", "e2e_gauge 1e+21"]
    assert custom_lines(text, "e2e_hist") == [
        "# HELP e2e_hist a histogram",
        "# TYPE e2e_hist histogram",
        'e2e_hist_count{x="y"} 4',
        'e2e_hist_sum{x="y"} 7.649999999999999',
        'e2e_hist_bucket{x="y",le="0.1"} 2',
        'e2e_hist_bucket{x="y",le="1"} 2',
        'e2e_hist_bucket{x="y",le="2.5"} 3',
        'e2e_hist_bucket{x="y",le="+Inf"} 4',
    ]


@pytest.mark.parametrize("code, answer", [
    ("c.increment(-1)", failure(
        "Failed to increment metric value",
        "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values.")),
    ("c.set(3)", failure("Failed to set metric value",
                         "TRITONSERVER_METRIC_KIND_COUNTER does not support Set")),
    ("c.observe(3)", failure("Failed to observe metric value",
                             "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe")),
    ("pb_utils.MetricFamily('e2e_errors', 'd', pb_utils.MetricFamily.GAUGE)", failure(
        "Error when creating MetricFamily", "Family name already exists with different type")),
    ("pb_utils.MetricFamily('bad name', 'd', pb_utils.MetricFamily.COUNTER)",
     failure("Error when creating MetricFamily", "Invalid metric name")),
    ("pb_utils.MetricFamily('__x', 'd', pb_utils.MetricFamily.COUNTER)",
     failure("Error when creating MetricFamily", "Invalid metric name")),
    ("f.Metric(labels={'1a': 'x'})", failure("Error when creating Metric", "Invalid label name")),
    ("f.Metric(labels={'a': 1})",
     failure("Error when creating Metric", "attempt to access JSON non-string as string")),
    ("f.Metric(labels=[('a', 'b')])",
     "EXC TritonModelException: Failed to create metric. Labels must be a dictionary."),
    ("f.Metric(buckets=[1.0])",
     "EXC TritonModelException: Failed to create metric. Unexpected buckets found."),
    ("h.Metric(labels={'x': 'y'})",
     "EXC TritonModelException: Failed to create metric. Missing required buckets."),
    ("h.Metric(labels={'x': 'y'}, buckets=[2.0, 1.0])",
     failure("Error when creating Metric", "Bucket Boundaries must be strictly sorted")),
    ("h.Metric(labels={'x': 'y'}, buckets=[1, 1])",
     failure("Error when creating Metric", "Bucket Boundaries must be strictly sorted")),
    ("hm.value()", failure("Failed to get metric value",
                           "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")),
    ("hm.increment(1)", failure("Failed to increment metric value",
                                "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment")),
    ("gm.observe(1)", failure("Failed to observe metric value",
                              "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe")),
])
def test_errors_are_tritons(plain, code, answer):
    run(plain, """
f = pb_utils.MetricFamily("e2e_errors", "d", pb_utils.MetricFamily.COUNTER)
c = f.Metric(labels={"k": "v"})
g = pb_utils.MetricFamily("e2e_errors_gauge", "d", pb_utils.MetricFamily.GAUGE)
gm = g.Metric()
h = pb_utils.MetricFamily("e2e_errors_hist", "d", pb_utils.MetricFamily.HISTOGRAM)
hm = h.Metric(labels={"x": "z"}, buckets=[1.0])
""")
    assert run(plain, code) == answer


def test_a_deleted_family_takes_its_series_and_invalidates_its_metrics(plain):
    deleted = ("Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
               "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' "
               "objects have been deleted.")
    run(plain, """
lf = pb_utils.MetricFamily("e2e_life", "life", pb_utils.MetricFamily.GAUGE)
lm = lf.Metric(labels={"k": "v"})
lm.set(4)
""")
    assert custom_lines(scrape(plain), "e2e_life{") == ['e2e_life{k="v"} 4']
    assert run(plain, "del lf\nlm.set(5)") == (
        f"EXC TritonModelException: Failed to set metric value: {deleted}")
    assert run(plain, "lm.value()") == (
        f"EXC TritonModelException: Failed to get metric value: {deleted}")
    assert custom_lines(scrape(plain), "e2e_life") == []
    # A family made and dropped in one expression is gone at once, as in Triton.
    assert run(plain, """
t = pb_utils.MetricFamily("e2e_temp", "t", pb_utils.MetricFamily.GAUGE).Metric()
t.set(1)
""").startswith("EXC TritonModelException: Failed to set metric value: Invalid")


def test_one_name_and_labels_make_one_series_the_first_description_stays(plain):
    assert run(plain, """
f1 = pb_utils.MetricFamily("e2e_dup", "first description", pb_utils.MetricFamily.COUNTER)
f2 = pb_utils.MetricFamily("e2e_dup", "second description", pb_utils.MetricFamily.COUNTER)
m1 = f1.Metric(labels={"z": "1"})
m2 = f2.Metric(labels={"z": "1"})
m1.increment(True)
m2.increment(2)
del m1  # a Metric object's end changes nothing: its family holds it
import gc; gc.collect()
result = m2.value()
""") == "3.0"
    assert custom_lines(scrape(plain), "e2e_dup") == [
        "# HELP e2e_dup first description", "# TYPE e2e_dup counter", 'e2e_dup{z="1"} 3']


def test_a_thread_counting_while_the_model_is_idle_is_served(plain):
    run(plain, """
import threading, time
def later():
    time.sleep(0.3)
    fam = pb_utils.MetricFamily("e2e_later", "from a thread", pb_utils.MetricFamily.GAUGE)
    fam.Metric().set(fam.Metric().value() + 42)
    keep.append(fam)
keep = []
threading.Thread(target=later).start()
""")
    wait_until(lambda: "e2e_later 42" in scrape(plain), "the thread's gauge")


def test_load_and_unload_need_explicit_model_control(plain):
    refused = "explicit model load / unload is not allowed if polling is enabled"
    assert run(plain, 'pb_utils.load_model("target")') == failure("Failed to load model", refused)
    assert run(plain, 'pb_utils.unload_model("target")') == failure("Failed to unload model", refused)
    assert run(plain, 'result = pb_utils.is_model_ready("probe"), pb_utils.is_model_ready("target")') \
        == "(True, True)"


# The model loading API -----------------------------------------------------------


def test_load_ready_unload(explicit):
    assert run(explicit, 'result = pb_utils.is_model_ready("target"), pb_utils.is_model_ready("nope")') \
        == "(False, False)"
    assert run(explicit, 'result = pb_utils.load_model("target")') == "None"
    assert run(explicit, """
result = (pb_utils.is_model_ready("target"), pb_utils.is_model_ready("target", "1"),
          pb_utils.is_model_ready("target", "2"), pb_utils.is_model_ready("target", " 1x"))
""") == "(True, True, False, True)"
    assert run(explicit, "result = 7", model="target") == "7"
    assert run(explicit, 'result = pb_utils.unload_model("target")') == "None"
    assert run(explicit, 'result = pb_utils.is_model_ready("target")') == "False"
    # Unloading what is not loaded is no error, as in Triton.
    assert run(explicit, 'pb_utils.unload_model("target"); result = "again"') == "'again'"


def test_load_from_config_and_files(explicit):
    assert run(explicit, """
import json
cfg = json.dumps({"backend": "python", "input": [{"name": "CMD", "data_type": "TYPE_STRING", "dims": [1]}],
                  "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]}]})
src = open(args["model_repository"] + "/1/model.py", "rb").read()
pb_utils.load_model("from_files", config=cfg, files={"file:1/model.py": src})
result = pb_utils.is_model_ready("from_files")
""") == "True"
    assert run(explicit, "result = args['model_name']", model="from_files") == "'from_files'"
    assert run(explicit, 'pb_utils.unload_model("from_files")') == "None"


def test_failed_loads_and_bad_versions_are_errors(explicit):
    answer = run(explicit, 'pb_utils.load_model("broken")')
    assert answer.startswith(failure("Failed to load model", "")), answer
    assert "broken on purpose" in answer
    assert run(explicit, 'pb_utils.is_model_ready("target", "abc")') == failure(
        "Failed to check model readiness",
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0")
    assert run(explicit, 'pb_utils.is_model_ready("target", "-1")') == failure(
        "Failed to check model readiness",
        "failed to get model version from specified version string '-1', "
        "version should be an integral value > 0")


def test_a_model_reloads_and_unloads_itself_from_execute(explicit):
    run(explicit, 'pb_utils.load_model("target")')
    assert run(explicit, 'pb_utils.load_model("target"); result = pb_utils.is_model_ready("target")',
               model="target") == "True"
    # The unload returns at once; the request in flight is answered, then
    # the model goes.
    assert run(explicit, 'pb_utils.unload_model("target"); result = pb_utils.is_model_ready("target")',
               model="target") == "False"
    assert run(explicit, 'result = pb_utils.is_model_ready("target")') == "False"


def test_loading_itself_from_initialize_is_refused_not_a_deadlock(explicit):
    """Real Triton never finishes this load: the model's load waits for
    its initialize, which waits for the same model's load."""
    nereid_only(explicit)
    response = requests.post(f"{explicit.base}/v2/repository/models/self_loader/load", timeout=60)
    assert response.status_code == 200, response.text
    client = httpclient.InferenceServerClient(explicit.http_url)
    cmd = httpclient.InferInput("CMD", [1], "BYTES")
    cmd.set_data_from_numpy(np.array([b""], dtype=np.object_))
    errors = json.loads(client.infer("self_loader", [cmd]).as_numpy("OUT")[0])
    refused = ("model 'self_loader' is being loaded or unloaded, and its own instance cannot load "
               "or unload it until that is done")
    assert errors[0].startswith("Failed to load model: Failed to process the request for model "
                                "'self_loader_0', message: " + refused), errors
    assert errors[1].startswith("Failed to unload model: "), errors
    requests.post(f"{explicit.base}/v2/repository/models/self_loader/unload", timeout=60)


def test_an_unloaded_models_metrics_go_with_it(explicit):
    """Nereid drops what a worker held when it exits; real Triton keeps an
    unloaded model's series on /metrics, at their last values."""
    nereid_only(explicit)
    run(explicit, 'pb_utils.load_model("target")')
    run(explicit, """
fam = pb_utils.MetricFamily("e2e_target_metric", "d", pb_utils.MetricFamily.GAUGE)
fam.Metric(labels={"m": "target"}).set(5)
""", model="target")
    assert custom_lines(scrape(explicit), "e2e_target_metric{") == ['e2e_target_metric{m="target"} 5']
    run(explicit, 'pb_utils.unload_model("target")')
    wait_until(lambda: not custom_lines(scrape(explicit), "e2e_target_metric"),
               "the unloaded model's series to go")


# Rescheduling -------------------------------------------------------------------

RESCHEDULE_REFUSED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag.")


def test_a_rescheduled_request_gets_tritons_release_error(plain):
    """Triton logs this error and leaves the client waiting forever; Nereid
    answers with it. (Triton reschedules only for a model with
    sequence_batching.iterative_sequence, which Nereid does not load yet.)"""
    nereid_only(plain)
    client = httpclient.InferenceServerClient(plain.http_url)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("rescheduling", [], parameters={"mode": "reschedule"})
    assert raised.value.status() == "400"
    assert raised.value.message().startswith(RESCHEDULE_REFUSED)
    with pytest.raises(InferenceServerException, match="Expected a None object in the execute "
                                                       "function return list for reschduled request"):
        client.infer("rescheduling", [], parameters={"mode": "reschedule answered"})
    assert client.infer("rescheduling", [], parameters={"mode": "abc"}).as_numpy("OUT").tolist() == [3]


def test_a_rescheduled_stream_ends_with_the_release_error(plain):
    nereid_only(plain)
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(plain.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("rescheduling_stream", [], parameters={"mode": "reschedule"})
        first, error = answers.get(timeout=60)
        assert error is None and first.as_numpy("OUT").tolist() == [10]
        _, error = answers.get(timeout=60)
        assert error is not None and str(error.message()).startswith(RESCHEDULE_REFUSED)
    finally:
        client.stop_stream()

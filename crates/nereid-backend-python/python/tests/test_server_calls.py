"""The side channel: custom metrics and the model control calls, the test
playing the server, which answers each call with a `reply` (see
../README.md, "Side channel")."""

import json

import pytest

from harness import initialize_message, read_raw, read_tensor, request

INSTANCE = "server_calls_0_0"


def failed(prefix, message):
    return (f"TritonModelException: {prefix}: Failed to process the request for model "
            f"'{INSTANCE}', message: {message}")


@pytest.fixture
def worker(start_worker):
    """server_calls, initialized: its counter made (family 1, metric 2)."""
    worker = start_worker()
    worker.send(initialize_message("server_calls"))
    family = worker.expect_side("metric_family")
    assert {k: family[k] for k in ("name", "description", "kind")} == {
        "name": "requests_total", "description": "Requests seen", "kind": "COUNTER"}
    worker.reply(family, id=1)
    metric = worker.expect_side("metric")
    assert (metric["family"], metric["labels"], metric["buckets"]) == (1, {"model": "server_calls"}, None)
    worker.reply(metric, id=2)
    worker.expect("ready")
    return worker


def run(worker, case):
    worker.send({"op": "execute", "requests": [request("r", [], ["RESULT"], parameters={"case": case})]})


def result(worker):
    response = worker.expect("responses")["responses"][0]
    return json.loads(read_tensor(response["outputs"][0])[0])


def test_metric_calls_wait_for_the_servers_reply(worker):
    run(worker, "count")
    update = worker.expect_side("metric_update")
    assert (update["metric"], update["action"], update["value"]) == (2, "increment", 2.0)
    worker.reply(update)
    value = worker.expect_side("metric_update")
    assert (value["metric"], value["action"]) == (2, "value")
    worker.reply(value, value=2.0)
    assert result(worker) == 2.0


def test_non_finite_numbers_travel_as_names(worker):
    run(worker, "gauge_nan")
    worker.reply(worker.expect_side("metric_family"), id=3)
    worker.reply(worker.expect_side("metric"), id=4)
    update = worker.expect_side("metric_update")
    assert (update["action"], update["value"]) == ("set", "nan")
    worker.reply(update)
    worker.reply(worker.expect_side("metric_update"), value="nan")
    assert result(worker) == "nan"


def test_a_server_error_is_raised_with_tritons_words(worker):
    run(worker, "count")
    message = ("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
               "non-negative values.")
    worker.reply(worker.expect_side("metric_update"), error={"message": message, "code": "INVALID_ARG"})
    assert result(worker) == failed("Failed to increment metric value", message)


def test_a_deleted_family_invalidates_its_metrics_and_is_removed(worker):
    run(worker, "lifetime")
    worker.reply(worker.expect_side("metric_family"), id=10)
    worker.reply(worker.expect_side("metric"), id=11)
    assert worker.expect_side("metric_family_delete") == {"op": "metric_family_delete", "family": 10}
    assert result(worker) == (
        "TritonModelException: Failed to set metric value: Invalid metric operation as the corresponding "
        "'MetricFamily' has been deleted. The 'MetricFamily' object should be deleted AFTER its "
        "corresponding 'Metric' objects have been deleted.")


def test_metric_arguments_are_checked_before_asking(worker):
    run(worker, "histogram_checks")
    worker.reply(worker.expect_side("metric_family"), id=20)
    metric = worker.expect_side("metric")
    assert (metric["labels"], metric["buckets"]) == ({"x": "y"}, [0.5, 1.0])
    worker.reply(metric, id=21)
    observe = worker.expect_side("metric_update")
    assert (observe["action"], observe["value"]) == ("observe", "inf")
    worker.reply(observe)
    assert result(worker) == [
        "TritonModelException: Failed to create metric. Missing required buckets.",
        "TritonModelException: Failed to create metric. Buckets must be a list.",
        failed("Error when creating Metric", "attempt to access JSON non-string as string"),
        "RuntimeError: Unable to cast Python instance to C++ type (#define "
        "PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)",
    ]


def test_load_model_sends_its_files_through_the_arena(worker):
    run(worker, "load")
    call = worker.expect_side("load_model")
    assert (call["model_name"], call["config"]) == ("other", '{"backend": "python"}')
    files = {entry["path"]: read_raw(entry) for entry in call["files"]}
    assert files == {"file:1/model.py": b"print('other')", "file:1/empty.txt": b""}
    message = "explicit model load / unload is not allowed if polling is enabled"
    worker.reply(call, error={"message": message, "code": "UNAVAILABLE"})
    assert result(worker) == failed("Failed to load model", message)


def test_unload_and_readiness(worker):
    run(worker, "unload")
    call = worker.expect_side("unload_model")
    assert (call["model_name"], call["unload_dependents"]) == ("other", True)
    worker.reply(call)
    assert result(worker) is None
    run(worker, "ready")
    first = worker.expect_side("model_ready")
    assert (first["model_name"], first["model_version"]) == ("other", -1)
    worker.reply(first, ready=True)
    second = worker.expect_side("model_ready")
    assert second["model_version"] == 2  # std::stol reads " 2x" as 2
    worker.reply(second, ready=False)
    assert result(worker) == [True, False]
    run(worker, "bad_version")
    assert result(worker) == failed(
        "Failed to check model readiness",
        "failed to get model version from specified version string '-1', version should be an "
        "integral value > 0")


def test_calls_from_a_thread_are_answered_while_the_worker_is_idle(worker):
    run(worker, "later")
    assert result(worker) is None
    # execute has returned; the thread's calls still get through.
    worker.reply(worker.expect_side("metric_update"))
    worker.reply(worker.expect_side("metric_update"), value=3.0)
    # The thread logs what its second call answered. (Waiting here, not
    # after finalize: a line logged as the worker exits goes to stderr.)
    worker.expect_log("counted later: 3.0")
    worker.send({"op": "finalize"})
    worker.expect("finalized")
    assert worker.wait() == 0


def test_end_of_input_fails_a_call_in_flight(worker):
    worker.send({"op": "execute", "requests": [
        request("r", [], ["RESULT"], parameters={"case": "count", "raise": True})]})
    worker.expect_side("metric_update")
    worker.end_input()
    error = worker.expect("responses")["error"]["message"]
    assert failed("Failed to increment metric value",
                  "The connection to the Nereid server was closed.") in error

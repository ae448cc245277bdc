"""BLS through the worker: the test plays the server, answering the
worker's `bls` frames with `bls_response` frames (see ../README.md)."""

import os

import numpy as np
import pytest

from harness import ShmFile, outputs_by_name, read_tensor, request


def add_sub_answer(frame, server_file, operation=np.add):
    """Serve one `bls` frame as model add_sub would, from `server_file`."""
    inputs = {d["name"]: read_tensor(d) for d in frame["request"]["inputs"]}
    results = {"OUTPUT0": operation(inputs["INPUT0"], inputs["INPUT1"]),
               "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"]}
    outputs = [server_file.put(name, "FP32", results[name])
               for name in frame["request"]["requested_output_names"]]
    return {"op": "bls_response", "tag": frame["tag"], "response": {"outputs": outputs, "error": None}}


def test_bls_round_trip_and_outputs_outlive_the_server_file(start_worker, shm):
    worker = start_worker()
    worker.initialize("bls")
    a, b = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
    worker.send({"op": "execute", "requests": [
        request("r", [shm.put("INPUT0", "FP32", a), shm.put("INPUT1", "FP32", b)], ["SUM", "DIFF", "SUM2"])]})
    server_file = ShmFile()
    try:
        first = worker.expect("bls")
        assert {key: value for key, value in first["request"].items() if key != "inputs"} == {
            "model_name": "add_sub", "model_version": -1, "requested_output_names": ["OUTPUT0", "OUTPUT1"],
            "request_id": "", "correlation_id": 0, "flags": 0, "timeout": 0, "parameters": {}}
        for descriptor in first["request"]["inputs"]:
            assert os.path.basename(descriptor["shm"]["path"]).startswith(f"nereid-py-{worker.process.pid}-")
        worker.send(add_sub_answer(first, server_file))
        second = worker.expect("bls")
        # The first answer was released before the second call was made:
        # reuse its region, the worker must have copied the outputs out.
        assert worker.released == [first["tag"]]
        server_file.write(0, b"\xff" * server_file.offset)
        server_file.offset = 0
        assert {key: value for key, value in second["request"].items() if key != "inputs"} == {
            "model_name": "add_sub", "model_version": 2, "requested_output_names": ["OUTPUT0"],
            "request_id": "second", "correlation_id": "sequence-7", "flags": 1, "timeout": 5,
            "parameters": {"call": 2, "tag": "x", "on": True}}
        worker.send(add_sub_answer(second, server_file))
        reply = worker.expect("responses")
    finally:
        server_file.close()
    outputs = outputs_by_name(reply["responses"][0])
    np.testing.assert_array_equal(read_tensor(outputs["SUM"]), a + b)
    np.testing.assert_array_equal(read_tensor(outputs["DIFF"]), a - b)
    np.testing.assert_array_equal(read_tensor(outputs["SUM2"]), a + 2 * b)


def test_bls_error_comes_back_in_the_response(start_worker, shm):
    worker = start_worker()
    worker.initialize("bls")
    data = shm.put("INPUT0", "FP32", np.ones(4, np.float32))
    worker.send({"op": "execute", "requests": [request("r", [data, dict(data, name="INPUT1")], ["SUM"])]})
    frame = worker.expect("bls")
    error = {"message": "Request for unknown model: 'add_sub' is not found", "code": "NOT_FOUND"}
    worker.send({"op": "bls_response", "tag": frame["tag"], "response": {"outputs": [], "error": error}})
    reply = worker.expect("responses")
    assert reply["responses"][0]["error"] == error
    assert worker.released == [frame["tag"]]


def answer_left_and_right(worker, a, b):
    """Serve the two calls of bls_async / bls_concurrent, which both arrive
    before either is answered, in reverse order; returns the reply."""
    frames = {frame["request"]["model_name"]: frame for frame in (worker.expect("bls"), worker.expect("bls"))}
    server_file = ShmFile()
    try:
        worker.send(add_sub_answer(frames["right"], server_file, np.multiply))
        worker.send(add_sub_answer(frames["left"], server_file, np.add))
        reply = worker.expect("responses")
    finally:
        server_file.close()
    assert sorted(worker.released) == sorted(frame["tag"] for frame in frames.values())
    outputs = outputs_by_name(reply["responses"][0])
    np.testing.assert_array_equal(read_tensor(outputs["OUT_LEFT"]), a + b)
    np.testing.assert_array_equal(read_tensor(outputs["OUT_RIGHT"]), a * b)
    return reply


@pytest.mark.parametrize("transport", ["pipes", "socket"])
def test_async_execute_has_several_bls_calls_in_flight(start_worker, shm, transport):
    worker = start_worker(transport)
    worker.initialize("bls_async")
    a, b = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
    for _ in range(2):  # the instance's event loop serves every execute
        worker.released.clear()
        worker.send({"op": "execute", "requests": [
            request("r", [shm.put("INPUT0", "FP32", a), shm.put("INPUT1", "FP32", b)], ["OUT_LEFT", "OUT_RIGHT"])]})
        answer_left_and_right(worker, a, b)


@pytest.mark.parametrize("how", ["threads", "asyncio_run"])
def test_bls_off_the_main_thread_while_it_waits(start_worker, shm, how):
    worker = start_worker()
    worker.initialize("bls_concurrent")
    a, b = np.arange(4, dtype=np.float32), np.full(4, 5, np.float32)
    worker.send({"op": "execute", "requests": [
        request("r", [shm.put("INPUT0", "FP32", a), shm.put("INPUT1", "FP32", b)], ["OUT_LEFT", "OUT_RIGHT"],
                parameters={"how": how})]})
    answer_left_and_right(worker, a, b)
    if how == "threads":
        assert sorted(log["message"] for log in worker.logs) == ["calling left", "calling right"]


def test_end_of_input_fails_bls_calls_in_flight_then_finalizes(start_worker, shm):
    worker = start_worker()
    worker.initialize("bls")
    data = shm.put("INPUT0", "FP32", np.ones(4, np.float32))
    worker.send({"op": "execute", "requests": [request("r", [data, dict(data, name="INPUT1")], ["SUM"])]})
    worker.expect("bls")
    worker.end_input()
    reply = worker.expect("responses")
    assert reply["responses"][0]["error"] == {
        "message": "The connection to the Nereid server was closed.", "code": "INTERNAL"}
    assert worker.receive() is None
    assert worker.wait() == 0


def square_answers(frame, server_file):
    """Serve one decoupled `bls` frame as Triton's square_int32 example
    would: IN responses with OUT = IN, then the final one, empty."""
    count = int(read_tensor(frame["request"]["inputs"][0])[0])
    out = [{"outputs": [server_file.put("OUT", "INT32", np.array([count], np.int32))], "error": None}
           for _ in range(count)]
    final = {"outputs": [], "error": None}
    return {"op": "bls_response", "tag": frame["tag"], "response": {"responses": out + [final]}}


@pytest.mark.parametrize("iterate", ["for", "async for"])
def test_async_exec_decoupled_responses_read_with_for_or_async_for(start_worker, shm, iterate):
    worker = start_worker()
    worker.initialize("bls_decoupled_async")
    worker.send({"op": "execute", "requests": [
        request("r", [shm.put("IN", "INT32", np.array([3], np.int32))], ["SUM"],
                parameters={"iterate": iterate})]})
    frames = [worker.expect("bls"), worker.expect("bls")]
    assert all(frame["decoupled"] is True for frame in frames)
    server_file = ShmFile()
    try:
        for frame in frames:
            worker.send(square_answers(frame, server_file))
        reply = worker.expect("responses")
    finally:
        server_file.close()
    response = reply["responses"][0]
    assert response.get("error") is None, response
    np.testing.assert_array_equal(read_tensor(outputs_by_name(response)["SUM"]), [18])

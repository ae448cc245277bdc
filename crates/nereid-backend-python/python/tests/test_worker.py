"""Drives nereid_worker.py as a subprocess through its protocol, the test
playing the server (see ../README.md and harness.py)."""

import json
import os
import signal
import struct
import time

import numpy as np
import pytest

import codec
from nereid_pb import channel
from harness import (
    NUMPY_TYPES,
    ShmFile,
    arena_files,
    initialize_message,
    model_file,
    outputs_by_name,
    read_raw,
    read_tensor,
    request,
)


def tensor_config(name, data_type, dims):
    return {"name": name, "data_type": data_type, "dims": dims}


ADD_SUB_CONFIG = {
    "name": "add_sub",
    "max_batch_size": 0,
    "input": [tensor_config("INPUT0", "TYPE_FP32", [4]), tensor_config("INPUT1", "TYPE_FP32", [4])],
    "output": [tensor_config("OUTPUT0", "TYPE_FP32", [4]), tensor_config("OUTPUT1", "TYPE_INT32", [4])],
}


def failure(instance, text):
    return f"Failed to process the request(s) for model '{instance}', message: {text}"


# auto_complete ------------------------------------------------------------------


def test_auto_complete_fills_the_config_and_exits(start_worker):
    worker = start_worker()
    instance_group = [{"kind": "KIND_CPU", "count": 2}]
    worker.send({
        "op": "auto_complete",
        "model_file": model_file("auto_complete"),
        "config": {"name": "auto_complete", "max_batch_size": 0, "input": [], "output": [],
                   "instance_group": instance_group},
    })
    config = worker.expect("config")["config"]
    assert config["max_batch_size"] == 4
    assert config["dynamic_batching"] == {}
    assert config["instance_group"] == instance_group
    assert config["input"] == [
        tensor_config("INPUT0", "TYPE_FP32", [4]),
        {**tensor_config("INPUT1", "TYPE_FP32", [4]), "optional": True},
    ]
    assert config["output"] == [tensor_config("OUTPUT0", "TYPE_FP32", [4])]
    assert worker.wait() == 0
    assert [(log["level"], log["message"]) for log in worker.logs] == [("info", "auto-complete done")]


def test_auto_complete_fills_in_a_partial_input(start_worker):
    worker = start_worker()
    worker.send({
        "op": "auto_complete",
        "model_file": model_file("auto_complete"),
        "config": {"name": "auto_complete", "max_batch_size": 2, "output": [],
                   "input": [{"name": "INPUT0", "data_type": "TYPE_INVALID", "dims": []}]},
    })
    config = worker.expect("config")["config"]
    assert config["input"][0] == tensor_config("INPUT0", "TYPE_FP32", [4])
    assert config["max_batch_size"] == 4


def test_auto_complete_refuses_a_conflicting_input(start_worker):
    worker = start_worker()
    worker.send({
        "op": "auto_complete",
        "model_file": model_file("auto_complete"),
        "config": {"name": "auto_complete", "max_batch_size": 0, "output": [],
                   "input": [tensor_config("INPUT1", "TYPE_INT32", [4])]},
    })
    error = worker.expect("error")
    assert error["message"] == (
        "ValueError: unable to load model 'auto_complete', configuration expects datatype "
        "TYPE_INT32 for input 'INPUT1', model provides TYPE_FP32"
    )
    assert "auto_complete_config" in error["traceback"]
    assert worker.wait() == 1


def test_auto_complete_without_the_method_returns_the_config(start_worker):
    worker = start_worker()
    config = {"name": "identity", "max_batch_size": 8, "input": [], "output": [], "parameters": {}}
    worker.send({"op": "auto_complete", "model_file": model_file("identity"), "config": config})
    assert worker.expect("config")["config"] == config
    assert worker.wait() == 0


# initialize and execute ----------------------------------------------------------


def test_initialize_args_and_request_metadata_reach_the_model(start_worker, shm):
    worker = start_worker()
    worker.initialize("echo_args")
    reply = worker.execute([
        request("key-1", [shm.put("INPUT0", "INT32", np.arange(3))], ["ARGS", "REQUEST"],
                request_id="client-1", correlation_id="sequence-9", flags=3, timeout=250,
                parameters={"p": 1, "q": "s", "b": True}),
        request("key-2", [], ["REQUEST"], correlation_id=42),
    ])
    assert reply["error"] is None
    first, second = (outputs_by_name(response) for response in reply["responses"])
    assert json.loads(read_tensor(first["ARGS"])[0]) == initialize_message("echo_args")["args"]
    metadata = json.loads(read_tensor(first["REQUEST"])[0])
    assert json.loads(metadata.pop("parameters")) == {"p": 1, "q": "s", "b": True}
    assert metadata == {
        "request_id": "client-1",
        "correlation_id": "sequence-9",
        "flags": 3,
        "timeout": 250,
        "requested_output_names": ["ARGS", "REQUEST"],
        "inputs": ["INPUT0"],
        "is_cancelled": False,
        "model_dir": os.path.dirname(model_file("echo_args")),
        # Triton 2.51 gives a model that is not decoupled a sender too.
        "response_sender_error": None,
    }
    # Outputs not requested are dropped; request_id defaults to the id.
    assert list(second) == ["REQUEST"]
    metadata = json.loads(read_tensor(second["REQUEST"])[0])
    assert (metadata["request_id"], metadata["correlation_id"], metadata["parameters"]) == ("key-2", 42, "{}")


@pytest.mark.parametrize("transport", ["pipes", "socket"])
def test_add_sub_answers_every_request_of_a_batch(start_worker, shm, transport):
    worker = start_worker(transport)
    worker.initialize("add_sub", ADD_SUB_CONFIG)
    rng = np.random.default_rng(1)
    pairs = [(rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)) for _ in range(3)]
    reply = worker.execute([
        request(f"r{index}", [shm.put("INPUT0", "FP32", a), shm.put("INPUT1", "FP32", b)],
                ["OUTPUT0", "OUTPUT1"])
        for index, (a, b) in enumerate(pairs)
    ])
    assert reply["error"] is None and len(reply["responses"]) == 3
    for response, (a, b) in zip(reply["responses"], pairs):
        assert response["error"] is None and response["parameters"] == {}
        outputs = outputs_by_name(response)
        assert outputs["OUTPUT0"]["datatype"] == "FP32" and outputs["OUTPUT0"]["shape"] == [4]
        assert outputs["OUTPUT1"]["datatype"] == "INT32"
        np.testing.assert_array_equal(read_tensor(outputs["OUTPUT0"]), a + b)
        np.testing.assert_array_equal(read_tensor(outputs["OUTPUT1"]), (a - b).astype(np.int32))


def test_identity_round_trips_every_datatype_byte_exact(start_worker, shm):
    worker = start_worker()
    worker.initialize("identity")
    rng = np.random.default_rng(2)
    inputs, expected = [], {}
    for datatype, numpy_type in NUMPY_TYPES.items():
        if datatype == "BOOL":
            data = rng.integers(0, 2, (3, 5)).astype(np.bool_)
        else:
            data = np.frombuffer(rng.bytes(15 * np.dtype(numpy_type).itemsize), numpy_type).reshape(3, 5)
        inputs.append(shm.put(f"INPUT_{datatype}", datatype, data))
        expected[datatype] = data.tobytes()
    texts = [b"", b"\x00", b"\xff\xfe\x00", b"a\x00b", "h\u00e9llo".encode(), b"\x00" * 5]
    inputs.append(shm.put("INPUT_BYTES", "BYTES", texts, shape=[2, 3]))
    inputs.append(shm.put("INPUT_EMPTY", "FP32", np.zeros((0, 4), np.float32)))
    names = [f"OUTPUT_{datatype}" for datatype in [*NUMPY_TYPES, "BYTES", "EMPTY"]]
    reply = worker.execute([request("r", inputs, names)])
    assert reply["error"] is None, reply
    outputs = outputs_by_name(reply["responses"][0])
    assert sorted(outputs) == sorted(names)
    for datatype in NUMPY_TYPES:
        descriptor = outputs[f"OUTPUT_{datatype}"]
        assert (descriptor["datatype"], descriptor["shape"]) == (datatype, [3, 5])
        assert read_raw(descriptor) == expected[datatype], datatype
    assert outputs["OUTPUT_BYTES"]["shape"] == [2, 3]
    assert read_tensor(outputs["OUTPUT_BYTES"]) == texts
    assert outputs["OUTPUT_EMPTY"]["shape"] == [0, 4] and outputs["OUTPUT_EMPTY"]["shm"]["size"] == 0
    path = outputs["OUTPUT_FP32"]["shm"]["path"]
    assert os.path.basename(path).startswith(f"nereid-py-{worker.process.pid}-")
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_bytes_model_keeps_bytes_exact_and_encodes_str_as_utf8(start_worker, shm):
    worker = start_worker()
    worker.initialize("bytes_ops")
    texts = [b"abc", b"", b"\x00x\xff", "gr\u00fc\u00dfe".encode()]
    reply = worker.execute([request("r", [shm.put("TEXT", "BYTES", texts, shape=[4])],
                                    ["UPPER", "LENGTH", "DECODED"])])
    outputs = outputs_by_name(reply["responses"][0])
    assert read_tensor(outputs["UPPER"]) == [text.upper() for text in texts]
    np.testing.assert_array_equal(read_tensor(outputs["LENGTH"]), [3, 0, 3, 7])
    assert read_tensor(outputs["DECODED"]) == [
        text.decode("utf-8", "replace").encode("utf-8") for text in texts
    ]


# errors ----------------------------------------------------------------------------


def test_error_response_fails_only_its_request(start_worker, shm):
    worker = start_worker()
    worker.initialize("error_response")
    good = shm.put("IN", "INT64", np.array([1, 2]))
    bad = shm.put("IN", "INT64", np.array([1, -2]))
    reply = worker.execute([request("a", [good], ["OUT"]), request("b", [bad], ["OUT"])])
    assert reply["error"] is None
    ok, failed = reply["responses"]
    assert ok["error"] is None and ok["parameters"] == {"doubled": True}
    np.testing.assert_array_equal(read_tensor(ok["outputs"][0]), [2, 4])
    assert failed == {"outputs": [], "parameters": {},
                      "error": {"message": "IN must not be negative", "code": "INVALID_ARG"}}


def test_exception_in_execute_fails_the_batch_with_tritons_message(start_worker, shm):
    worker = start_worker()
    worker.initialize("faulty")
    data = shm.put("IN", "FP32", np.ones(2, np.float32))
    reply = worker.execute([request("a", [data], ["OUT"], parameters={"mode": "raise"}),
                            request("b", [data], ["OUT"])])
    assert reply["responses"] is None and reply["error"]["code"] == "INTERNAL"
    message = reply["error"]["message"]
    assert message.startswith(failure("faulty_0_0", "ValueError: boom\n\nAt:\n"))
    frames = message.split("At:\n")[1].splitlines()
    path = model_file("faulty")
    assert frames[0].startswith(f"  {path}(") and frames[0].endswith("): helper_that_fails")
    assert frames[1].startswith(f"  {path}(") and frames[1].endswith("): execute")
    assert len(frames) == 2
    # The instance keeps serving.
    reply = worker.execute([request("c", [data], ["OUT"])])
    assert reply["error"] is None and reply["responses"][0]["error"] is None


@pytest.mark.parametrize("mode, text", [
    ("short", "Number of InferenceResponse objects do not match the number of InferenceRequest "
              "objects. InferenceRequest(s) size is:2, and InferenceResponse(s) size is:1\n"),
    ("not_list", "Expected a list in the execute return, found type '<class 'tuple'>'."),
    ("bad_item", "Expected an 'InferenceResponse' object in the execute function return list, "
                 "found type '<class 'str'>'."),
])
def test_broken_execute_contract_fails_every_request(start_worker, shm, mode, text):
    worker = start_worker()
    worker.initialize("faulty")
    data = shm.put("IN", "FP32", np.ones(2, np.float32))
    reply = worker.execute([request("a", [data], ["OUT"], parameters={"mode": mode}),
                            request("b", [data], ["OUT"])])
    assert reply == {"op": "responses", "responses": None,
                     "error": {"message": failure("faulty_0_0", text), "code": "INTERNAL"}}


def test_sys_exit_in_execute_is_a_failure_not_an_exit(start_worker, shm):
    worker = start_worker()
    worker.initialize("faulty")
    data = shm.put("IN", "FP32", np.ones(2, np.float32))
    reply = worker.execute([request("a", [data], ["OUT"], parameters={"mode": "exit"})])
    assert reply["error"]["message"].startswith(failure("faulty_0_0", "SystemExit: 3\n"))
    assert worker.process.poll() is None


def test_import_error_is_reported_and_the_worker_exits_1(start_worker):
    worker = start_worker()
    worker.send(initialize_message("import_error"))
    error = worker.expect("error")
    assert error["message"] == "ModuleNotFoundError: No module named 'nereid_module_that_does_not_exist'"
    assert error["traceback"].startswith("Traceback (most recent call last):")
    assert model_file("import_error") in error["traceback"]
    assert worker.wait() == 1


def test_protocol_errors_are_answered_and_the_worker_goes_on(start_worker, shm):
    worker = start_worker()
    worker.send({"op": "bogus"})
    assert worker.expect("error")["message"] == "nereid_pb.wire.ProtocolError: unknown op 'bogus'"
    worker.send({"op": "execute", "requests": []})
    assert worker.expect("error")["message"] == "nereid_pb.wire.ProtocolError: execute before initialize"
    worker.send_raw(channel.JSON, b"{not json")
    assert worker.expect("error")["message"].startswith("nereid_pb.wire.ProtocolError: frame is not valid JSON")
    worker.initialize("identity")
    # An execute message cut short, one with a type number Triton lacks,
    # and one that names a file its table does not hold.
    _, whole = codec.encode({"op": "execute", "requests": [
        request("r", [shm.put("INPUT_X", "FP32", np.ones(2, np.float32))], ["OUTPUT_X"])]}, worker.keys)
    for payload in (whole[:-3], whole.replace(struct.pack("<BI", 11, 1), struct.pack("<BI", 99, 1)),
                    whole.replace(struct.pack("<IQQ", 0, 0, 8), struct.pack("<IQQ", 5, 0, 8))):
        worker.send_raw(channel.EXECUTE, payload)
        error = worker.expect("error")["message"]
        assert error.startswith("nereid_pb.wire.ProtocolError: "), error
    assert "unknown type number 99" in error or "names file 5 of 1" in error
    short = dict(shm.put("INPUT_X", "FP32", np.ones(2, np.float32)), shape=[3])
    worker.send({"op": "execute", "requests": [request("r", [short], ["OUTPUT_X"])]})
    assert "8 bytes do not fit shape [3] of FP32 (12 bytes)" in worker.expect("error")["message"]
    reply = worker.execute([request("r", [shm.put("INPUT_X", "FP32", np.ones(2, np.float32))], ["OUTPUT_X"])])
    assert reply["error"] is None


# cancellation, logging, output isolation --------------------------------------------


@pytest.mark.parametrize("transport", ["pipes", "socket"])
@pytest.mark.parametrize("together", [False, True], ids=["later", "same_write"])
def test_cancel_reaches_a_running_execute_that_does_no_bls(start_worker, shm, transport, together):
    # The model only polls is_cancelled(); the cancel comes while it runs,
    # or in the same write as the execute (then it is read with it).
    worker = start_worker(transport)
    worker.initialize("cancellable")
    data = shm.put("IN", "INT32", np.array([7]))
    execute = {"op": "execute", "requests": [request("a", [data], ["OUT"]), request("b", [data], ["OUT"])]}
    cancel = {"op": "cancel", "request_ids": ["b", "not-running"]}
    if together:
        worker.send(execute, cancel)
    else:
        worker.send(execute)
        time.sleep(0.1)
        worker.send(cancel)
    kept, cancelled = worker.expect("responses")["responses"]
    np.testing.assert_array_equal(read_tensor(kept["outputs"][0]), [7])
    assert cancelled["error"] == {"message": "request cancelled", "code": "CANCELLED"}


def test_logger_calls_become_log_frames(start_worker, shm):
    worker = start_worker()
    worker.initialize("echo_args")
    worker.execute([request("r", [], ["ARGS"])])
    logs = [(log["level"], log["message"]) for log in worker.logs]
    assert logs == [("info", "initialize echo_args"), ("info", "info message"), ("warn", "warn message"),
                    ("error", "error message"), ("verbose", "verbose message"), ("warn", "explicit warning")]
    assert all(log["file"] == model_file("echo_args") and log["line"] > 0 for log in worker.logs)


def test_prints_go_to_stderr_not_to_the_protocol(start_worker):
    worker = start_worker()
    worker.initialize("echo_args")  # its initialize writes a fake frame to stdout
    worker.execute([request("r", [], ["ARGS"])])
    worker.send({"op": "finalize"})
    worker.expect("finalized")
    assert worker.wait() == 0
    stderr = worker.stderr()
    for text in ("echo_args: initialize printed this", '{"op":"ready"}',
                 "echo_args: raw write to fd 1", "echo_args: execute printed this"):
        assert text in stderr


# arena, files, shutdown --------------------------------------------------------------


def test_arena_grows_and_retires_old_files(start_worker, shm):
    worker = start_worker()
    worker.initialize("identity")
    small = shm.put("INPUT_X", "UINT8", np.arange(16, dtype=np.uint8))
    first = worker.execute([request("r", [small], ["OUTPUT_X"])])["responses"][0]["outputs"][0]
    big = shm.put("INPUT_X", "UINT8", np.full(3 << 20, 5, np.uint8))
    second = worker.execute([request("r", [big], ["OUTPUT_X"])])["responses"][0]["outputs"][0]
    assert second["shm"]["path"] != first["shm"]["path"]
    assert not os.path.exists(first["shm"]["path"])
    assert read_raw(second) == b"\x05" * (3 << 20)
    third = worker.execute([request("r", [small], ["OUTPUT_X"])])["responses"][0]["outputs"][0]
    assert (third["shm"]["path"], third["shm"]["offset"]) == (second["shm"]["path"], 0)
    assert arena_files(worker.process.pid) == [os.path.basename(second["shm"]["path"])]


def test_inputs_are_remapped_when_the_server_file_grows(start_worker):
    worker = start_worker()
    worker.initialize("identity")
    server_file = ShmFile(size=1 << 16)
    try:
        for step, size in enumerate((1 << 16, 1 << 22)):
            with open(server_file.path, "r+b") as handle:
                handle.truncate(size)
            server_file.offset = size - 4096
            data = np.full(1024, step + 1, np.int32)
            reply = worker.execute([request("r", [server_file.put("INPUT_X", "INT32", data)], ["OUTPUT_X"])])
            np.testing.assert_array_equal(read_tensor(reply["responses"][0]["outputs"][0]), data)
        # A file the server removed is unmapped once a new file shows up.
        other, newer = ShmFile(), ShmFile()
        worker.execute([request("r", [other.put("INPUT_X", "INT32", data)], ["OUTPUT_X"])])
        other.close()
        worker.execute([request("r", [server_file.put("INPUT_X", "INT32", data)], ["OUTPUT_X"])])
        with open(f"/proc/{worker.process.pid}/maps") as maps:
            assert other.path in maps.read()
        worker.execute([request("r", [newer.put("INPUT_X", "INT32", data)], ["OUTPUT_X"])])
        newer.close()
        with open(f"/proc/{worker.process.pid}/maps") as maps:
            assert other.path not in maps.read()
    finally:
        server_file.close()


@pytest.mark.parametrize("size", [4, 1 << 16], ids=["small_copied", "large_viewed"])
def test_inputs_are_writable_without_touching_the_server_file(start_worker, shm, size):
    worker = start_worker()
    worker.initialize("increment")
    first = np.arange(size, dtype=np.int32)
    descriptor = shm.put("INPUT_X", "INT32", first)
    reply = worker.execute([request("r", [descriptor], ["OUTPUT_X"])])
    np.testing.assert_array_equal(read_tensor(reply["responses"][0]["outputs"][0]), first + 1)
    np.testing.assert_array_equal(read_tensor(descriptor), first)
    # The server reuses the region: the model sees the new data, not the
    # pages it wrote before.
    second = np.full(size, 1000, np.int32)
    shm.write(descriptor["shm"]["offset"], second.tobytes())
    reply = worker.execute([request("r", [descriptor], ["OUTPUT_X"])])
    np.testing.assert_array_equal(read_tensor(reply["responses"][0]["outputs"][0]), second + 1)
    np.testing.assert_array_equal(read_tensor(descriptor), second)


def test_finalize_calls_the_model_and_removes_the_arena(start_worker, shm):
    worker = start_worker()
    worker.initialize("echo_args")
    worker.execute([request("r", [], ["ARGS"])])
    pid = worker.process.pid
    assert arena_files(pid)
    worker.send({"op": "finalize"})
    worker.expect("finalized")
    assert worker.wait() == 0
    assert worker.logs[-1]["message"] == "finalize called"
    assert arena_files(pid) == []


@pytest.mark.parametrize("transport", ["pipes", "socket"])
def test_end_of_input_finalizes_and_exits(start_worker, transport):
    worker = start_worker(transport)
    worker.initialize("echo_args")
    worker.end_input()
    assert worker.receive() is None  # collects the logs up to the end
    assert worker.wait() == 0
    assert worker.logs[-1]["message"] == "finalize called"
    assert arena_files(worker.process.pid) == []


def test_sigterm_removes_the_arena_and_exits(start_worker, shm):
    worker = start_worker()
    worker.initialize("identity")
    worker.execute([request("r", [shm.put("INPUT_X", "UINT8", np.ones(4, np.uint8))], ["OUTPUT_X"])])
    pid = worker.process.pid
    assert arena_files(pid)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait() == 128 + signal.SIGTERM
    assert arena_files(pid) == []


def reschedule_config(decoupled):
    config = {"name": "reschedule", "max_batch_size": 0, "input": [],
              "output": [tensor_config("OUT", "TYPE_INT32", [1])]}
    if decoupled:
        config["model_transaction_policy"] = {"decoupled": True}
    return config


def test_rescheduled_requests_are_named_in_the_answer(start_worker):
    worker = start_worker()
    worker.initialize("reschedule", reschedule_config(False))
    reply = worker.execute([request("1", [], ["OUT"], parameters={"mode": "reschedule"}),
                            request("2", [], ["OUT"], parameters={"mode": "plain"})])
    assert reply["rescheduled"] == ["1"]
    assert reply["responses"][0] is None
    np.testing.assert_array_equal(read_tensor(reply["responses"][1]["outputs"][0]), [5])
    # Without rescheduling the answer has no such key.
    assert "rescheduled" not in worker.execute([request("3", [], ["OUT"])])


def test_a_rescheduled_request_with_a_response_fails_the_batch_as_in_triton(start_worker):
    worker = start_worker()
    worker.initialize("reschedule", reschedule_config(False))
    reply = worker.execute([request("1", [], ["OUT"], parameters={"mode": "reschedule answered"})])
    assert reply["responses"] is None
    assert reply["error"]["message"] == failure(
        "reschedule_0_0",
        "Expected a None object in the execute function return list for reschduled request, "
        "found type '<class 'triton_python_backend_utils.InferenceResponse'>'.")


def test_a_decoupled_model_reschedules_after_sending(start_worker):
    worker = start_worker()
    worker.initialize("reschedule", reschedule_config(True))
    worker.send({"op": "execute", "requests": [
        request("1", [], ["OUT"], parameters={"mode": "reschedule"}),
        request("2", [], ["OUT"], parameters={"mode": ""})]})
    first, second = worker.expect("response"), worker.expect("response")
    assert (first["id"], first["final"], second["id"], second["final"]) == ("1", False, "2", True)
    reply = worker.expect("responses")
    assert (reply["responses"], reply["rescheduled"]) == ([None, None], ["1"])


# open requests (decoupled) ------------------------------------------------------------


OPEN_CONFIG = {"name": "open_until_cancelled", "max_batch_size": 0,
               "model_transaction_policy": {"decoupled": True}}


def test_a_decoupled_request_stays_open_and_cancellable_past_the_next_execute(start_worker, shm):
    worker = start_worker()
    worker.initialize("open_until_cancelled", OPEN_CONFIG)
    first = shm.put("IN", "INT32", np.array([1, 2], np.int32))
    second = shm.put("IN", "INT32", np.array([3], np.int32))
    assert worker.execute([request("1", [first], ["OUT"])])["responses"] == [None]
    worker.send({"op": "execute", "read": 1, "requests": [request("2", [second], ["OUT"])]})
    assert worker.expect("responses")["responses"] == [None]
    # The first request is still open: a cancel reaches it.
    worker.send({"op": "cancel", "request_ids": ["1"]})
    answer = worker.expect("response")
    assert (answer["id"], answer["final"]) == ("1", True)
    assert read_tensor(answer["response"]["outputs"][0]).tolist() == [1, 2]
    worker.send({"op": "cancel", "request_ids": ["2"]})
    answer = worker.expect("response")
    assert (answer["id"], answer["final"]) == ("2", True)


def test_response_outputs_are_reused_only_once_the_server_read_them(start_worker, shm):
    worker = start_worker()
    worker.initialize("open_until_cancelled", OPEN_CONFIG)
    data = shm.put("IN", "INT32", np.arange(4, dtype=np.int32))

    def answered(key, read=None):
        frame = {"op": "execute", "requests": [request(key, [data], ["OUT"])]}
        if read is not None:
            frame["read"] = read
        worker.send(frame)
        worker.expect("responses")
        worker.send({"op": "cancel", "request_ids": [key]})
        return worker.expect("response")["response"]["outputs"][0]["shm"]

    # Frames so far: responses 0, response 1. With read 0 the first
    # response's region stays in use, so the next one goes elsewhere.
    first = answered("1", read=0)
    second = answered("2", read=0)
    assert (second["path"], second["offset"]) != (first["path"], first["offset"])
    # `release` with every frame read frees both regions.
    worker.send({"op": "release", "read": 4})
    third = answered("3", read=4)
    assert (third["path"], third["offset"]) == (first["path"], first["offset"])


def test_an_answer_too_large_for_the_channel_fails_the_batch_and_the_worker_goes_on(start_worker, shm):
    worker = start_worker()
    worker.initialize("long_error")
    reply = worker.execute([request("r", [], ["OUT"], parameters={"size": 1 << 20})])
    assert reply["responses"] is None
    assert "over the channel's" in reply["error"]["message"], reply
    reply = worker.execute([request("s", [], ["OUT"], parameters={"size": 10})])
    assert reply["error"] is None and reply["responses"][0]["error"]["message"] == "x" * 10

"""In-process checks of the worker's messages: the channel's rings (in
order across the wrap, JSON records, doorbells), the binary request-path
messages against the harness's codec, side frames, descriptor JSON, and the
Inbox's leader/follower reading with several waiting threads."""

import json
import os
import struct
import sys
import threading
import time

import numpy as np
import pytest

import codec
from harness import PYTHON_DIR

sys.path.insert(0, str(PYTHON_DIR))
from nereid_pb import channel, messages  # noqa: E402
from nereid_pb.inbox import Inbox  # noqa: E402
from nereid_pb.tensor import Tensor  # noqa: E402
from nereid_pb.wire import FrameWriter, ProtocolError  # noqa: E402


class Link:
    """Both ends of a channel in one process: `server` and `worker`, each
    with a reader and a writer; the doorbells are two pipes."""

    def __init__(self):
        fd = channel.create_file()
        self.down = os.pipe()  # server -> worker doorbell
        self.up = os.pipe()  # worker -> server doorbell
        self.worker = channel.Channel(os.dup(fd), self.down[0], self.up[1])
        self.server = channel.Channel(fd, self.up[0], self.down[1], server=True)

    def close(self):
        for fd in (*self.down, *self.up):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def link():
    link = Link()
    yield link
    link.close()


def take_all(reader):
    """Every message waiting (ProtocolErrors as their text)."""
    messages_ = []
    while True:
        try:
            message = reader.take()
        except ProtocolError as error:
            message = f"error: {error}"
        if message is None:
            return messages_
        messages_.append(message)


def test_messages_come_in_order_across_the_wrap(link):
    writer, reader = link.server.writer, link.worker.reader
    big = bytes(range(256)) * 1200
    for round_ in range(40):
        payload = big[: (round_ * 40_993) % len(big)]
        writer.send_message(channel.EXECUTE, payload)
        writer.send({"op": "x", "n": round_, "s": "\u00e9"})
        assert take_all(reader) == [(channel.EXECUTE, payload), {"op": "x", "n": round_, "s": "\u00e9"}]


def test_broken_json_records_are_protocol_errors_and_the_rest_reads_on(link):
    writer, reader = link.server.writer, link.worker.reader
    for payload in (b' {"op": "c"}\n', b"{not json", b"[1]", b'{"op": 1} {}', b"\xff"):
        writer.send_message(channel.JSON, payload)
    writer.send({"op": "d"})
    assert [m if isinstance(m, dict) else m.split(":")[1].strip() for m in take_all(reader)] == [
        {"op": "c"}, "frame is not valid JSON", "frame holds a JSON list, not an object",
        "frame is not valid JSON", "frame is not valid JSON", {"op": "d"}]


def test_only_a_sleeping_reader_is_rung(link):
    writer, reader = link.server.writer, link.worker.reader
    writer.send({"op": "a"})
    assert reader.arm(), "a message is waiting: no sleep"
    assert take_all(reader) == [{"op": "a"}]
    assert not reader.arm(), "the ring is empty: the reader may sleep"
    writer.send({"op": "b"})
    writer.send({"op": "c"})
    assert os.read(link.down[0], 64) == b"\1", "one doorbell byte for a sleeper's messages"
    reader.disarm()
    writer.send({"op": "d"})
    os.set_blocking(link.down[0], False)
    with pytest.raises(BlockingIOError):
        os.read(link.down[0], 64)
    assert take_all(reader) == [{"op": "b"}, {"op": "c"}, {"op": "d"}]
    os.close(link.down[1])
    os.set_blocking(link.down[0], True)
    assert not reader.fill(), "the doorbell's end: the server is gone"


def test_oversize_messages_are_refused(link):
    with pytest.raises(ProtocolError, match="over the channel's"):
        link.worker.writer.send_message(channel.RESPONSE, bytes(channel.MAX_MESSAGE + 1))


def test_execute_decodes_what_the_server_encodes():
    keys = codec.Keys()
    shm = {"path": "/dev/shm/in", "offset": 64, "size": 16}
    request = {"id": "r", "request_id": "client", "correlation_id": "seq-1", "flags": 3,
               "timeout": 5, "parameters": {"b": True, "i": -2, "s": "\u00e9", "f": 0.5},
               "requested_output_names": ["OUT"],
               "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 4], "shm": shm}]}
    kind, payload = codec.encode({"op": "execute", "read": 7, "requests": [request, {"id": "9"}]}, keys)
    assert kind == channel.EXECUTE
    read, decoded = messages.decode_execute(payload)
    assert read == 7 and len(decoded) == 2
    first, second = decoded
    assert (first.key, first.request_id, first.correlation_id, first.flags, first.timeout) == (
        keys.number("r"), "client", "seq-1", 3, 5)
    assert first.parameters == request["parameters"] and first.outputs == ["OUT"]
    assert first.inputs == [("IN", 11, (1, 4), "/dev/shm/in", 64, 16)]
    assert (second.key, second.correlation_id, second.inputs) == (9, 0, [])
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError):
            messages.decode_execute(payload[:cut])
    with pytest.raises(ProtocolError, match="past its end"):
        messages.decode_execute(payload + b"\0")
    huge = struct.pack("<QI", 0, 0) + struct.pack("<I", 1 << 30)
    with pytest.raises(ProtocolError, match="more than the message holds"):
        messages.decode_execute(huge)


class Arena:
    """An arena of one Block in memory, for encoding without files."""

    class Block:
        path = "/dev/shm/out"

        def __init__(self, size):
            self.data = bytearray(size)

        def write_array(self, offset, array):
            self.data[offset:offset + array.nbytes] = array.tobytes()

        def write_bytes(self, offset, data):
            self.data[offset:offset + len(data)] = data

    def allocate(self, sizes):
        offsets, at = [], 0
        for size in sizes:
            offsets.append(at)
            at += -(-size // 64) * 64
        self.block = Arena.Block(at)
        return self.block, offsets

    def free(self, *blocks):
        pass


def test_responses_encode_as_the_server_reads_them():
    from nereid_pb.errors import TritonError
    from nereid_pb.inference import InferenceResponse

    arena, blocks = Arena(), []
    encoder = messages.Encoder()
    encoder.parts.append(struct.pack("<I", 3))
    encoder.parts.append(messages.SLOT_ANSWERED)
    out = Tensor("OUT", np.arange(4, dtype=np.float32).reshape(1, 4))
    encoder.entry(InferenceResponse([out, Tensor("SKIP", np.zeros(1))], parameters={"p": 1}),
                  {"OUT"}, arena, blocks)
    encoder.parts.append(messages.SLOT_ANSWERED)
    encoder.entry(InferenceResponse(error=TritonError("bad", TritonError.INVALID_ARG)), set(), arena, blocks)
    encoder.parts.append(messages.SLOT_RESCHEDULED)
    answer = codec.decode_responses(encoder.message(b"\0"), codec.Keys(), ["a", "b", "c"])
    first, second, third = answer["responses"]
    assert first["parameters"] == {"p": 1}
    assert first["outputs"] == [{"name": "OUT", "datatype": "FP32", "shape": [1, 4],
                                 "shm": {"path": "/dev/shm/out", "offset": 0, "size": 16}}]
    assert bytes(arena.block.data[:16]) == out.as_numpy().tobytes()
    assert second["error"] == {"message": "bad", "code": "INVALID_ARG"}
    assert third is None and answer["rescheduled"] == ["c"]
    failed = codec.decode_responses(messages.batch_error("boom"), codec.Keys(), [])
    assert failed["responses"] is None and failed["error"]["message"] == "boom"


def test_frame_writer_writes_whole_side_frames():
    read_fd, write_fd = os.pipe()
    writer = FrameWriter(write_fd)
    writer.send({"op": "log", "message": "h\u00e9"})
    writer.send({"op": "x"})
    os.close(write_fd)
    data = os.read(read_fd, 1 << 16)
    os.close(read_fd)
    frames = []
    while data:
        (length,) = struct.unpack_from("<I", data)
        frames.append(json.loads(data[4:4 + length]))
        data = data[4 + length:]
    assert frames == [{"op": "log", "message": "h\u00e9"}, {"op": "x"}]


class Router:
    """Routes frames {"op": key} into a set, as the worker's route would."""

    def __init__(self):
        self.seen = set()
        self.closed = False

    def __call__(self, message):
        if message is None:
            self.closed = True
        else:
            self.seen.add(message["op"])


def test_inbox_waiters_take_turns_reading(link):
    router = Router()
    inbox = Inbox(link.worker.reader, router)
    writer = link.server.writer
    done = {}

    def wait_for(key):
        inbox.wait(lambda: key in router.seen)
        done[key] = True

    threads = [threading.Thread(target=wait_for, args=(key,), name=key) for key in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # all three wait: one reads, two sleep
    for key in ("c", "a", "b"):
        writer.send({"op": key})
        time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=60)
    assert done == {"a": True, "b": True, "c": True}
    # Nothing is read while nobody waits; poll_now takes what has arrived.
    writer.send({"op": "d"})
    writer.send({"op": "e"})
    time.sleep(0.02)
    assert "d" not in router.seen
    inbox.poll_now()
    assert {"d", "e"} <= router.seen
    inbox.poll_now()  # nothing there: returns at once
    os.close(link.down[1])
    inbox.wait(lambda: router.closed)
    inbox.wait(lambda: True)  # after the end of input, waiting does not read


def test_inbox_wake_interrupts_a_wakeable_reader(link):
    inbox = Inbox(link.worker.reader, Router())
    flag = []
    timer = threading.Timer(0.05, lambda: (flag.append(True), inbox.wake()))
    timer.start()
    inbox.wait(lambda: flag, wakeable=True)  # reads (no input comes) until woken
    timer.join()

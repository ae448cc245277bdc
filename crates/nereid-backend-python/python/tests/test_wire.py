"""In-process checks of the worker's frame reading and writing: FrameReader
and FrameWriter over a pipe, descriptor JSON, and the Inbox's
leader/follower reading with several waiting threads."""

import json
import os
import sys
import threading
import time

import pytest

from harness import PYTHON_DIR, frame

sys.path.insert(0, str(PYTHON_DIR))
from nereid_pb.inbox import Inbox  # noqa: E402
from nereid_pb.wire import FrameReader, FrameWriter, ProtocolError, descriptor_json  # noqa: E402


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def take_all(reader):
    """Every message the reader has buffered (ProtocolErrors as their text)."""
    messages = []
    while True:
        try:
            message = reader.take()
        except ProtocolError as error:
            message = f"error: {error}"
        if message is None:
            return messages
        messages.append(message)


def test_frame_reader_buffers_partial_and_several_frames(pipe):
    read_fd, write_fd = pipe
    reader = FrameReader(read_fd)
    data = frame({"op": "a"}) + frame({"op": "b", "x": "\u00e9"})
    os.write(write_fd, data[:3])
    assert reader.fill() and take_all(reader) == []
    os.write(write_fd, data[3:])
    assert reader.fill() and take_all(reader) == [{"op": "a"}, {"op": "b", "x": "\u00e9"}]
    for payload in (b' {"op": "c"}\n', b"{not json", b"[1]", b'{"op": 1} {}', b"\xff"):
        os.write(write_fd, len(payload).to_bytes(4, "little") + payload)
    os.write(write_fd, frame({"op": "d"}))
    assert reader.fill()
    assert [m if isinstance(m, dict) else m.split(":")[1].strip() for m in take_all(reader)] == [
        {"op": "c"}, "frame is not valid JSON", "frame holds a JSON list, not an object",
        "frame is not valid JSON", "frame is not valid JSON", {"op": "d"}]
    os.close(write_fd)
    assert not reader.fill()


def test_frame_writer_writes_whole_frames(pipe):
    read_fd, write_fd = pipe
    writer = FrameWriter(write_fd)
    writer.send({"op": "log", "message": "h\u00e9"})
    writer.send_json('{"op":"x"}')
    reader = FrameReader(read_fd)
    reader.fill()
    assert take_all(reader) == [{"op": "log", "message": "h\u00e9"}, {"op": "x"}]


@pytest.mark.parametrize("name", ["OUTPUT0", 'quote"back\\slash', "tab\tnew\nline\u0001", "gr\u00fc\u00dfe \u2603"])
def test_descriptor_json_is_the_json_of_the_descriptor(name):
    text = descriptor_json(name, 11, (2, 0, 3), json.dumps("/dev/shm/a\"b"), 128, 0)
    assert json.loads(text) == {"name": name, "datatype": "FP32", "shape": [2, 0, 3],
                                "shm": {"path": "/dev/shm/a\"b", "offset": 128, "size": 0}}
    assert json.loads(descriptor_json(name, 13, (), json.dumps("p"), 0, 4))["shape"] == []


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


def test_inbox_waiters_take_turns_reading(pipe):
    read_fd, write_fd = pipe
    router = Router()
    inbox = Inbox(FrameReader(read_fd), router)
    done = {}

    def wait_for(key):
        inbox.wait(lambda: key in router.seen)
        done[key] = True

    threads = [threading.Thread(target=wait_for, args=(key,), name=key) for key in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # all three wait: one reads, two sleep
    for key in ("c", "a", "b"):
        os.write(write_fd, frame({"op": key}))
        time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=60)
    assert done == {"a": True, "b": True, "c": True}
    # Nothing is read while nobody waits; poll_now takes what has arrived.
    os.write(write_fd, frame({"op": "d"}) + frame({"op": "e"}))
    time.sleep(0.02)
    assert "d" not in router.seen
    inbox.poll_now()
    assert {"d", "e"} <= router.seen
    inbox.poll_now()  # nothing there: returns at once
    os.close(write_fd)
    inbox.wait(lambda: router.closed)
    inbox.wait(lambda: True)  # after the end of input, waiting does not read


def test_inbox_wake_interrupts_a_wakeable_reader(pipe):
    read_fd, _write_fd = pipe
    inbox = Inbox(FrameReader(read_fd), Router())
    flag = []
    timer = threading.Timer(0.05, lambda: (flag.append(True), inbox.wake()))
    timer.start()
    inbox.wait(lambda: flag, wakeable=True)  # reads (no input comes) until woken
    timer.join()

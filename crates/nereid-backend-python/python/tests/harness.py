"""Plays the Nereid server's side of the worker protocol (see ../README.md):
starts nereid_worker.py as a subprocess with a channel (its doorbells two
pipes, or one socket as the worker's stdin and stdout) and the side
channel's pipe, sends and reads messages (the request path's binary ones
through codec.py, so tests see dicts), owns a shared-memory file for input
tensors, and reads output tensors back."""

import json
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))

import codec  # noqa: E402
from nereid_pb import channel  # noqa: E402
MODELS = Path(__file__).resolve().parent / "models"
# A bound on every wait for the worker, not an expected time: a worker
# started on a busy machine can take seconds to import numpy and answer.
TIMEOUT = 60.0

NUMPY_TYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BF16": np.uint16,  # raw bfloat16 words
}


def encode_bytes(items):
    """Triton's BYTES framing of a list of bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def decode_bytes(data):
    items, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        items.append(bytes(data[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    return items


def request(key, inputs, outputs, **fields):
    """One entry of an execute frame's 'requests'."""
    return {"id": key, "inputs": inputs, "requested_output_names": outputs, **fields}


def model_file(name):
    return str(MODELS / name / "1" / "model.py")


class Worker:
    """A running nereid_worker.py, talked to over `transport`: "pipes" (its
    stdin and stdout) or "socket" (one socket as both). Frames from it are
    read by a thread so that every wait has a timeout. Side frames (log
    lines, metrics and model control calls) come on a pipe of their own,
    read when asked for (`logs`, `expect_side`): what the worker wrote
    there before a main frame the test has is always found."""

    def __init__(self, transport="pipes"):
        self._side, side_theirs = os.pipe()
        channel_fd = channel.create_file()
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), NEREID_SIDE_FD=str(side_theirs),
                   NEREID_CHANNEL_FD=str(channel_fd))
        command = [sys.executable, str(PYTHON_DIR / "nereid_worker.py")]
        fds = (side_theirs, channel_fd)
        if transport == "socket":
            self._socket, theirs = socket.socketpair()
            self.process = subprocess.Popen(command, stdin=theirs, stdout=theirs,
                                            stderr=subprocess.PIPE, env=env, pass_fds=fds)
            theirs.close()
            doorbell_out = doorbell_in = self._socket.fileno()
        else:
            self._socket = None
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, env=env, pass_fds=fds)
            doorbell_out = self.process.stdin.fileno()
            doorbell_in = self.process.stdout.fileno()
        os.close(side_theirs)
        link = channel.Channel(os.dup(channel_fd), doorbell_in, doorbell_out, server=True)
        os.close(channel_fd)
        self._reader, self._writer = link.reader, link.writer
        self.keys = codec.Keys()
        self._executes = queue.Queue()  # the ids of each execute sent, in order
        self._side_buffer = bytearray()
        self._side_frames = []  # side frames other than logs, not yet expected
        self._logs = []
        self.frames = queue.Queue()
        self.released = []
        self._stderr = []
        threading.Thread(target=self._read_frames, daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()

    def _read_frames(self):
        """Reads the worker's messages until its doorbell ends, as dicts."""
        reader = self._reader
        while True:
            message = reader.take()
            if message is None:
                if reader.arm():
                    continue
                if not reader.fill():
                    while (message := reader.take()) is not None:
                        self.frames.put(self._decoded(message))
                    self.frames.put(None)
                    return
                continue
            self.frames.put(self._decoded(message))

    def _decoded(self, message):
        if type(message) is dict:
            if message.get("op") == "error" and not self._executes.empty():
                self._executes.get_nowait()
            return message
        kind, payload = message
        if kind == channel.RESPONSES:
            return codec.decode_responses(payload, self.keys, self._executes.get_nowait())
        if kind == channel.BLS:
            return codec.decode_bls(payload)
        if kind == channel.BLS_RELEASE:
            return {"op": "bls_release", "tag": struct.unpack("<Q", payload)[0]}
        assert kind == channel.RESPONSE, f"a message of kind {kind}"
        return codec.decode_response(payload, self.keys)

    def _read_stderr(self):
        for line in self.process.stderr:
            self._stderr.append(line.decode("utf-8", "replace"))

    def stderr(self):
        """What the worker wrote to stderr (all of it once it has exited)."""
        if self.process.poll() is not None:
            self._stderr_reader.join(timeout=TIMEOUT)
        return "".join(self._stderr)

    def send(self, *messages):
        """Send messages: the request path's in binary, the others as JSON."""
        for message in messages:
            if message.get("op") in ("execute", "cancel", "release", "bls_response"):
                if message["op"] == "execute":
                    self._executes.put([request["id"] for request in message["requests"]])
                self._writer.send_message(*codec.encode(message, self.keys))
            else:
                self._writer.send(message)

    def send_raw(self, kind, payload):
        """Send a message of `kind` as given (to test broken ones)."""
        self._writer.send_message(kind, payload)

    def end_input(self):
        """Close the worker's doorbell (the server going away)."""
        if self._socket is None:
            self.process.stdin.close()
        else:
            self._socket.shutdown(socket.SHUT_WR)

    def receive(self, timeout=TIMEOUT):
        """The next frame that is not a `bls_release` (its tag kept in
        `released`); None at end of output."""
        while True:
            frame = self.frames.get(timeout=timeout)
            if frame is not None and frame.get("op") == "bls_release":
                self.released.append(frame["tag"])
            else:
                return frame

    @property
    def logs(self):
        """Every `log` side frame so far."""
        while self._read_side(0):
            pass
        return self._logs

    def expect_log(self, message, timeout=TIMEOUT):
        """Wait until a `log` side frame with `message` has come."""
        deadline = time.monotonic() + timeout
        while message not in [log["message"] for log in self.logs]:
            left = deadline - time.monotonic()
            assert left > 0, f"no log '{message}' in {self._logs}\n{self.stderr()}"
            self._read_side(min(left, 0.1))

    def expect_side(self, op, timeout=TIMEOUT):
        """The next side frame other than a log; it must be an `op`."""
        deadline = time.monotonic() + timeout
        while not self._side_frames:
            left = deadline - time.monotonic()
            assert left > 0 and self._read_side(left), f"no side frame '{op}'\n{self.stderr()}"
        frame = self._side_frames.pop(0)
        assert frame.get("op") == op, f"expected side frame '{op}', got {frame}"
        return frame

    def reply(self, frame, error=None, **fields):
        """Answer the side call `frame` (a `reply` on the worker's stdin)."""
        self.send({"op": "reply", "tag": frame["tag"], "error": error, **fields})

    def _read_side(self, timeout):
        """Read what the side pipe has, waiting up to `timeout`; whether
        anything came."""
        if not select.select([self._side], [], [], timeout)[0]:
            return False
        data = os.read(self._side, 1 << 16)
        if not data:
            return False
        self._side_buffer += data
        while len(self._side_buffer) >= 4:
            (length,) = struct.unpack_from("<I", self._side_buffer)
            if len(self._side_buffer) < 4 + length:
                break
            frame = json.loads(self._side_buffer[4 : 4 + length])
            del self._side_buffer[: 4 + length]
            (self._logs if frame.get("op") == "log" else self._side_frames).append(frame)
        return True

    def expect(self, op, timeout=TIMEOUT):
        frame = self.receive(timeout)
        assert frame is not None and frame.get("op") == op, f"expected '{op}', got {frame}\n{self.stderr()}"
        return frame

    def wait(self, timeout=TIMEOUT):
        return self.process.wait(timeout=timeout)

    def close(self):
        """Stop the worker (SIGTERM: it removes its arena files) and remove
        whatever files a worker that had to be killed left behind."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for name in arena_files(self.process.pid):
            os.unlink(os.path.join("/dev/shm", name))
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        os.close(self._side)
        if self._socket is not None:
            self._socket.close()

    def initialize(self, model, config=None, instance=None):
        """Send `initialize` for tests/models/<model> and wait for `ready`."""
        self.send(initialize_message(model, config, instance))
        return self.expect("ready")

    def execute(self, requests):
        self.send({"op": "execute", "requests": requests})
        return self.expect("responses")


def frame(message):
    """A message as a side-channel frame: length, then JSON."""
    payload = json.dumps(message).encode("utf-8")
    return struct.pack("<I", len(payload)) + payload


def initialize_message(model, config=None, instance=None):
    config = config or {"name": model, "max_batch_size": 0, "input": [], "output": []}
    return {
        "op": "initialize",
        "model_file": model_file(model),
        "args": {
            "model_config": json.dumps(config),
            "model_instance_kind": "CPU",
            "model_instance_name": instance or f"{model}_0_0",
            "model_instance_device_id": "0",
            "model_repository": str(MODELS / model),
            "model_version": "1",
            "model_name": model,
        },
    }


class ShmFile:
    """A server-owned tensor file in /dev/shm; `put` appends a tensor and
    returns its descriptor."""

    def __init__(self, size=1 << 20):
        self.path = f"/dev/shm/nereid-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with open(self.path, "wb") as handle:
            handle.truncate(size)
        self.offset = 0

    def write(self, offset, data):
        with open(self.path, "r+b") as handle:
            handle.seek(offset)
            handle.write(data)

    def put(self, name, datatype, data, shape=None):
        """`data`: a list of bytes for BYTES (then `shape` is required), else
        an array (of raw uint16 words for BF16)."""
        if datatype == "BYTES":
            payload = encode_bytes(data)
        else:
            array = np.ascontiguousarray(data, dtype=NUMPY_TYPES[datatype])
            payload, shape = array.tobytes(), list(array.shape)
        offset = self.offset
        self.write(offset, payload)
        self.offset = -(-(offset + len(payload)) // 64) * 64
        return {"name": name, "datatype": datatype, "shape": list(shape),
                "shm": {"path": self.path, "offset": offset, "size": len(payload)}}

    def close(self):
        os.unlink(self.path)


def read_raw(descriptor):
    shm = descriptor["shm"]
    if shm["size"] == 0:
        return b""
    with open(shm["path"], "rb") as handle:
        handle.seek(shm["offset"])
        return handle.read(shm["size"])


def read_tensor(descriptor):
    """An output descriptor's data: a list of bytes for BYTES, else an array."""
    raw = read_raw(descriptor)
    if descriptor["datatype"] == "BYTES":
        return decode_bytes(raw)
    dtype = np.dtype(NUMPY_TYPES[descriptor["datatype"]]).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).reshape(descriptor["shape"])


def outputs_by_name(response):
    return {descriptor["name"]: descriptor for descriptor in response["outputs"]}


def arena_files(pid):
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(f"nereid-py-{pid}-"))

"""Worker-side state that pb_utils objects reach while a model runs.

pb_utils calls that need the server (BLS `exec`, `Logger`, `is_cancelled`)
go through the one Runtime the worker installs at start-up. Outside a worker
(say, a model's unit tests importing triton_python_backend_utils) there is
none: Logger writes to stderr and BLS raises as it does outside `execute`.

Threads: the main thread runs the model; the worker's reader thread calls
`finish_bls`, `cancel` and `close`; any model thread may start BLS calls or
log. All shared state is guarded by one lock.
"""

import itertools
import json
import sys
import threading

from .errors import ErrorCode, TritonError
from .wire import ChannelClosed, read_tensor, write_tensors

_current = None


def install(runtime):
    """Make `runtime` the one pb_utils uses (the worker does this once)."""
    global _current
    _current = runtime


def current():
    """The installed Runtime, or None outside a worker."""
    return _current


class CancelFlag:
    """Whether the server cancelled one request; set by the reader thread."""

    __slots__ = ("cancelled",)

    def __init__(self):
        self.cancelled = False


def _error_code(name):
    """The ErrorCode named `name` on the wire; INTERNAL when absent or unknown."""
    if isinstance(name, str):
        return ErrorCode.__members__.get(name, ErrorCode.INTERNAL)
    return ErrorCode.INTERNAL


def _parameters_text(parameters):
    """Response parameters as the JSON text InferenceResponse.parameters()
    returns ("{}" when absent)."""
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise ValueError("'parameters' is not an object")
    return json.dumps(parameters)


class Runtime:
    """The channel to the server, the output arena, BLS calls in flight and
    the cancellation flags of the requests being executed."""

    def __init__(self, channel, arena, files):
        self.channel = channel
        self.arena = arena
        self.files = files
        self.initialized = False
        self.finalizing = False
        self.model_dir = None
        self._lock = threading.Lock()
        self._tags = itertools.count(1)
        self._pending = {}  # tag -> (deliver, blocks)
        self._flags = {}  # request key -> [CancelFlag]
        self._closed_reason = None

    def log(self, level, message, filename, line):
        """Send a log frame; level is "info", "warn", "error" or "verbose".
        Once the server is gone, the line goes to stderr instead: logging
        never fails a model."""
        try:
            self.channel.send(
                {"op": "log", "level": level, "message": message, "file": filename, "line": line}
            )
        except ChannelClosed:
            sys.stderr.write(f"[{level}] {message}\n")

    # Cancellation -----------------------------------------------------------

    def track(self, keys):
        """New CancelFlags for the requests of an execute frame (called by the
        reader thread before it queues the frame, so that a `cancel` read
        right after always finds them)."""
        flags = [CancelFlag() for _ in keys]
        with self._lock:
            for key, flag in zip(keys, flags):
                self._flags.setdefault(key, []).append(flag)
        return flags

    def untrack(self, keys, flags):
        with self._lock:
            for key, flag in zip(keys, flags):
                entries = self._flags.get(key, [])
                if flag in entries:
                    entries.remove(flag)
                if not entries:
                    self._flags.pop(key, None)

    def cancel(self, keys):
        """Mark the requests with these keys cancelled; unknown keys (requests
        already answered) are ignored."""
        with self._lock:
            for key in keys:
                for flag in self._flags.get(key, ()):
                    flag.cancelled = True

    # BLS ----------------------------------------------------------------------

    def start_bls(self, request, deliver):
        """Write the request's inputs to the arena and send a `bls` frame.
        `deliver(outputs, error, parameters_text)` is called exactly once:
        from the reader thread when the answer arrives, or from here if
        sending fails (outputs are Tensors, error a TritonError or None)."""
        tag = None
        blocks = []
        try:
            descriptors, blocks = write_tensors(request.inputs(), self.arena)
            with self._lock:
                if self._closed_reason is not None:
                    raise ConnectionError(self._closed_reason)
                tag = next(self._tags)
                self._pending[tag] = (deliver, blocks)
            self.channel.send({"op": "bls", "tag": tag, "request": request._bls_fields(descriptors)})
        except Exception as error:
            with self._lock:
                owned = tag is None or self._pending.pop(tag, None) is not None
            if owned:
                for block in blocks:
                    self.arena.free(block)
                deliver([], TritonError(str(error)), "{}")

    def finish_bls(self, tag, payload):
        """Handle a `bls_response` (reader thread): copy the outputs out of
        the server's file, tell the server it may reuse that memory
        (`bls_release`), then hand the response to the waiting caller."""
        with self._lock:
            entry = self._pending.pop(tag, None)
        if entry is None:
            self.log("error", f"bls_response for unknown tag {tag!r} ignored", __file__, 0)
            parts = None
        else:
            deliver, blocks = entry
            for block in blocks:
                self.arena.free(block)
            try:
                parts = self._decode_bls_response(payload)
            except Exception as error:
                parts = ([], TritonError(f"Nereid could not read the BLS response: {error}"), "{}")
        try:
            self.channel.send({"op": "bls_release", "tag": tag})
        except ChannelClosed:
            pass
        if parts is not None:
            deliver(*parts)

    def _decode_bls_response(self, payload):
        if not isinstance(payload, dict):
            raise ValueError("'response' is missing or not an object")
        parameters = _parameters_text(payload.get("parameters"))
        error = payload.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            if not isinstance(message, str):
                message = "An error occurred while performing BLS request."
            code = _error_code(error.get("code")) if isinstance(error, dict) else ErrorCode.INTERNAL
            return [], TritonError(message, code), parameters
        outputs = [
            read_tensor(descriptor, self.files, copy=True)
            for descriptor in payload.get("outputs") or []
        ]
        return outputs, None, parameters

    def close(self, reason):
        """The server is gone (reader thread at end of input): fail every BLS
        call in flight, and any started later, with `reason`."""
        with self._lock:
            self._closed_reason = reason
            pending, self._pending = self._pending, {}
        for deliver, _blocks in pending.values():
            deliver([], TritonError(reason), "{}")

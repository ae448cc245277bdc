"""pb_utils.InferenceRequest and pb_utils.InferenceResponse.

An InferenceRequest is either one the server handed to `execute` (built by
the worker) or one a model builds to call another model (BLS) with `exec()`
or `await async_exec()`. Names, arguments, defaults and messages follow
Triton's pybind11 definitions; what Nereid cannot do yet (GPU memory for
BLS outputs) raises a TritonModelException saying so.

A request from the server has a response sender (`get_response_sender()`),
through which a decoupled model answers: any number of responses, from any
thread, then the final flag. A request whose sender never sent the final
flag sends it alone when the request is garbage collected, so that its
client is not left waiting (Triton leaves it waiting).
"""

import asyncio
import enum
import json
import threading

from . import runtime
from .errors import TritonError, TritonModelException, not_supported
from .tensor import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

_REQUIRED = object()


class MemoryType(enum.IntEnum):
    """Where a BLS caller prefers its outputs (Triton's PreferredMemory kinds)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """`PreferredMemory(preferred_memory_type, preferred_device_id=0)`; only
    CPU memory is available in Nereid."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        if MemoryType(preferred_memory_type) != TRITONSERVER_MEMORY_CPU:
            raise not_supported("PreferredMemory(TRITONSERVER_MEMORY_GPU)", "GPU memory")
        self.preferred_memory_type = MemoryType(preferred_memory_type)
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace; Nereid does not pass trace contexts to models."""

    def get_context(self):
        return None


_NO_TRACE = InferenceTrace()  # the trace of every request from the server


def checked_parameters(parameters):
    """Request/response parameters validated as Triton does (str keys; bool,
    int or str values), as a new dict."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


def _tensor_list(tensors, what, empty_message):
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"{what} must be a list of pb_utils.Tensor, found type '{type(tensors)}'")
    tensors = list(tensors)
    for tensor in tensors:
        if tensor is None:
            raise TritonModelException(empty_message)
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{what} must hold pb_utils.Tensor objects, found type '{type(tensor)}'")
    return tensors


class InferenceRequest:
    """`InferenceRequest(request_id="", correlation_id=0, inputs,
    requested_output_names, model_name, model_version=-1, flags=0, timeout=0,
    preferred_memory=..., trace=..., parameters=None)`."""

    def __init__(
        self,
        request_id="",
        correlation_id=0,
        inputs=_REQUIRED,
        requested_output_names=_REQUIRED,
        model_name=_REQUIRED,
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ):
        for name, value in (
            ("inputs", inputs),
            ("requested_output_names", requested_output_names),
            ("model_name", model_name),
        ):
            if value is _REQUIRED:
                raise TypeError(f"InferenceRequest() missing required argument '{name}'")
        # pybind11 takes bytes for a std::string as well (Triton's `bls`
        # example passes a model name read out of a BYTES tensor).
        request_id, model_name = _text(request_id), _text(model_name)
        if not isinstance(request_id, str) or not isinstance(model_name, str):
            raise TypeError("InferenceRequest request_id and model_name must be str")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)) or (
            isinstance(correlation_id, int) and correlation_id < 0
        ):
            raise TritonModelException("Correlation ID must be integer or string")
        names = list(requested_output_names)
        if not all(isinstance(name, str) for name in names):
            raise TypeError("requested_output_names must be a list of str")
        where = f"for request with id '{request_id}' and model name '{model_name}'"
        if "" in names:
            raise TritonModelException(f"Requested output name {where} should not be empty.")
        if preferred_memory is not None and not isinstance(preferred_memory, PreferredMemory):
            raise TypeError("preferred_memory must be a pb_utils.PreferredMemory")
        self._inputs = _tensor_list(
            inputs, "inputs", f"Input tensor {where} should not be empty."
        )
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = set(names)
        self._model_name = model_name
        # Nereid reads a word as a version label (docs/traffic.md); a
        # number, as Triton does.
        self._model_version = (
            model_version if isinstance(model_version, str) and not model_version.lstrip("-").isdigit()
            else int(model_version))
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._trace = trace if trace is not None else InferenceTrace()
        self._parameters = checked_parameters(parameters)
        self._key = None
        self._cancelled = None
        self._sender = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def _from_server(cls, key, inputs, request_id, correlation_id, flags, timeout, parameters,
                     requested_output_names, cancelled):
        """A request the server sent in an `execute` frame: `key` is its id
        there, `cancelled` the set of ids the server cancelled (kept up to
        date by the Runtime)."""
        request = cls.__new__(cls)
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._requested_output_names = set(requested_output_names)
        request._model_name = ""
        request._model_version = -1
        request._flags = flags
        request._timeout = timeout
        request._trace = _NO_TRACE
        request._parameters = parameters
        request._key = key
        request._cancelled = cancelled
        request._sender = None
        request._closed = False
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def __del__(self):
        # A server request whose final flag was never sent sends it now.
        if getattr(self, "_key", None) is None or self._closed:
            return
        current = runtime.current()
        if current is None or not current.decoupled:
            return
        self._closed = True
        try:
            current.log(
                "warn",
                f"request '{self._request_id}' was released without its final response flag; "
                "Nereid sends the flag alone",
                __file__,
                0,
            )
            current.send_response(self._key, None, (), True, note=True)
        except Exception:
            pass

    def inputs(self):
        """The input Tensors."""
        return self._inputs

    def request_id(self):
        """The request ID ("" when the client gave none)."""
        return self._request_id

    def correlation_id(self):
        """The sequence correlation ID, an int or a str (0 when none)."""
        return self._correlation_id

    def flags(self):
        """TRITONSERVER_REQUEST_FLAG_* bits."""
        return self._flags

    def set_flags(self, flags):
        self._flags = int(flags)

    def timeout(self):
        """The request timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self):
        """The request parameters as a JSON string, compact as Triton writes
        it (its keys in the server's order, which is sorted)."""
        return json.dumps(self._parameters, separators=(",", ":"))

    def trace(self):
        return self._trace

    def requested_output_names(self):
        """The names of the outputs to return, as a set (Triton returns a
        set too); outputs not named here are dropped from the response."""
        return self._requested_output_names

    def is_cancelled(self):
        """Whether the server cancelled this request (a client gave up). Reads
        a `cancel` frame that has arrived even while no BLS call waits."""
        if self._cancelled is None:
            return False
        runtime.current().inbox.poll_now()
        return self._key in self._cancelled

    def get_response_sender(self):
        """The request's ResponseSender (the same one on every call)."""
        if self._key is None:
            raise TritonModelException(
                "Unable to get the response sender of a request the model made (BLS)."
            )
        if self._sender is None:
            self._sender = ResponseSender(self)
        return self._sender

    def set_release_flags(self, flags):
        """How the request is released when `execute` returns:
        TRITONSERVER_REQUEST_RELEASE_ALL (the default), or
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE to have it executed again
        (its response, if not decoupled, must then be None). Only a model
        with `sequence_batching { iterative_sequence: true }` may
        reschedule; Nereid loads no such model yet, so a rescheduled request
        fails with Triton's release error (README.md, "Rescheduling")."""
        if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags < 2**32:
            raise TypeError(
                "set_release_flags(): incompatible function arguments. The following argument "
                "types are supported:\n    1. (self: triton_python_backend_utils.InferenceRequest, "
                f"flags: int) -> None\n\nInvoked with: {self!r}, {flags!r}"
            )
        self._release_flags = flags

    def _bls_runtime(self):
        current = runtime.current()
        if current is None or not current.initialized or current.finalizing:
            raise TritonModelException("BLS is only supported during the 'execute' function.")
        return current

    def exec(self, decoupled=False):
        """Run this request on `model_name` and wait for its response. Model
        errors come back in the response (`has_error()`), never raised. With
        `decoupled=True`, an iterator over every response of the model,
        ending with the final one (empty when the model sent the flag
        alone); Nereid delivers them once the last has come."""
        current = self._bls_runtime()
        result = []

        def deliver(parts):
            result.append(_responses(parts))

        current.start_bls(self, deliver, decoupled)
        current.inbox.wait(result.__len__)
        return iter(result[0]) if decoupled else result[0][0]

    def async_exec(self, decoupled=False):
        """Like `exec`, but returns an awaitable; needs a running event loop
        (an `async def execute`). Several calls may be in flight at once."""
        current = self._bls_runtime()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        delivered = []

        def settle(response):
            if not future.done():
                future.set_result(response)

        def deliver(parts):
            responses = _responses(parts)
            response = _AsyncResponses(responses) if decoupled else responses[0]
            delivered.append(response)
            loop.call_soon_threadsafe(settle, response)

        current.start_bls(self, deliver, decoupled)
        if loop is not current.loop:
            # Some other loop (say, asyncio.run inside a plain execute): no
            # thread is sure to read frames while it waits, so a pool thread
            # waits for the answer, reading if no other thread does.
            loop.run_in_executor(None, current.inbox.wait, delivered.__len__)
        return future


def _responses(parts):
    """The InferenceResponses of a BLS answer, from the (outputs, error,
    parameters) triples the runtime delivers."""
    return [InferenceResponse._from_parts(*part) for part in parts]


def _text(value):
    """A bytes value as the str it encodes (UTF-8); anything else as is."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


class _AsyncResponses:
    """The responses of an `async_exec(decoupled=True)`. Triton's examples
    (bls_decoupled/async_model.py) read them with a plain `for`; `async for`
    works too. Both draw on one iterator: each response comes out once."""

    def __init__(self, responses):
        self._responses = iter(responses)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._responses)

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return next(self._responses)
        except StopIteration:
            raise StopAsyncIteration from None


class ResponseSender:
    """`request.get_response_sender()`: `send(response=None, flags=0)`,
    `is_cancelled()`. Thread-safe; checks and messages as Triton's."""

    def __init__(self, request):
        self._request = request
        self._sent = 0
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"response must be a pb_utils.InferenceResponse, found type '{type(response)}'"
            )
        current = runtime.current()
        if current is None:
            raise TritonModelException("Unable to send response. The server is not reachable.")
        request = self._request
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not current.decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if request._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                request._closed = True
            self._sent += 1
            current.send_response(request._key, response, request._requested_output_names, final)

    def is_cancelled(self):
        """Whether the client of the request gave up."""
        return self._request.is_cancelled()


class InferenceResponse:
    """`InferenceResponse(output_tensors=[], error=None, parameters=None)`;
    `output_tensors()`, `has_error()`, `error()`, `parameters()`."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"error must be a pb_utils.TritonError, found type '{type(error)}'")
        self._output_tensors = _tensor_list(
            [] if output_tensors is None else output_tensors,
            "output_tensors",
            "Output tensor for inference response should not be empty.",
        )
        self._error = error
        self._parameters = {} if parameters is None else checked_parameters(parameters)

    @classmethod
    def _from_parts(cls, output_tensors, error, parameters):
        """A response assembled by Nereid (BLS answers), unvalidated."""
        response = cls.__new__(cls)
        response._output_tensors = output_tensors
        response._error = error
        response._parameters = parameters
        return response

    def output_tensors(self):
        """The output Tensors."""
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        """The TritonError, or None."""
        return self._error

    def parameters(self):
        """The response parameters as a JSON string."""
        return json.dumps(self._parameters)

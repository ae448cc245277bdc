"""Nereid's Python-backend worker.

Runs one instance of a Triton Python-backend model (a `model.py` defining
`class TritonPythonModel`) for the Nereid server, which starts it as
`python nereid_worker.py` with this folder on PYTHONPATH and speaks the
protocol described in README.md: messages in a shared-memory channel
(binary on the request path, JSON otherwise) with stdin and stdout as its
doorbells, tensor bytes in shared-memory files.

There is no reader thread: a thread reads messages when it waits for one
(nereid_pb/inbox.py). The main thread reads while it waits for the next
request and while an `async def execute` runs; a thread waiting for a BLS
answer reads when no other thread does; `is_cancelled()` reads what has
arrived. Whichever thread reads a message routes it (`Worker.route`):
`bls_response`, `reply`, `cancel` and `release` are handled at once, the
others queue for the main thread, which runs the model. Log lines, custom
metrics and model control calls go out on the side channel (fd 3).
"""

import asyncio
import concurrent.futures
import importlib.util
import collections
import json
import os
import platform
import signal
import struct
import sys
import threading
import traceback

from nereid_pb import messages, runtime
from nereid_pb.channel import BLS_RESPONSE, CANCEL, EXECUTE, RELEASE, RESPONSES, Channel, supported
from nereid_pb.inbox import Inbox
from nereid_pb.shm import InputFiles, OutputArena
from nereid_pb.wire import ChannelClosed, FrameWriter, ProtocolError, region_tensor
from triton_python_backend_utils import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceRequest,
    InferenceResponse,
    ModelConfig,
    TritonError,
    TritonModelException,
)

# What a model may raise out of its methods (SystemExit included, as Triton
# reports any Python exception).
_MODEL_ERRORS = (Exception, SystemExit)

# Mappings of server files that were removed are dropped at least this often
# (in executes), besides whenever a new file shows up.
_PRUNE_EVERY = 64

_CLOSED = "The connection to the Nereid server was closed."

_HERE = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_CODE = (
    os.path.join(_HERE, "nereid_pb") + os.sep,
    os.path.join(_HERE, "nereid_worker.py"),
    os.path.join(_HERE, "triton_python_backend_utils.py"),
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(concurrent.futures.__file__) + os.sep,
    threading.__file__,
)


def _is_decoupled(model_config):
    """Whether a model config (JSON text, as `initialize` args hold it) makes
    the model decoupled."""
    try:
        config = json.loads(model_config) if isinstance(model_config, str) else {}
        return bool((config.get("model_transaction_policy") or {}).get("decoupled"))
    except (ValueError, AttributeError):
        return False


class ContractError(Exception):
    """`execute` broke Triton's contract (wrong return value). Triton words
    these without exception type or traceback."""


def exception_line(error):
    """The last line of the error's traceback: 'ModuleNotFoundError: No
    module named 'x'' (for a SyntaxError, the line after the caret)."""
    lines = traceback.format_exception_only(type(error), error)
    notes = getattr(error, "__notes__", None)
    if notes and len(lines) > len(notes):
        lines = lines[: -len(notes)]
    return lines[-1].rstrip("\n")


def triton_error_text(error):
    """A Python exception as Triton's stub words it (pybind11's what()):
    'Type: message', then 'At:' and the model's frames, innermost first."""
    text = f"{type(error).__name__}: {error}"
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(_INTERNAL_CODE)
    ]
    if frames:
        text += "\n\nAt:\n" + "".join(
            f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(frames)
        )
    return text


def _expect(value, kind, what):
    """`value` if it is of the JSON type `kind` (a bool is not an int here),
    else ProtocolError."""
    if type(value) is kind:
        return value
    raise ProtocolError(f"{what} has the wrong type ({type(value).__name__}, expected {kind.__name__})")


class Worker:
    """The model instance and the protocol handlers around it."""

    def __init__(self, reader, writer, side=None):
        self.writer = writer
        self.requests = collections.deque()  # frames for the main thread, in order
        self.inbox = Inbox(reader, self.route)
        self.arena = OutputArena()
        self.runtime = runtime.Runtime(writer, self.inbox, self.arena, InputFiles(), side)
        runtime.install(self.runtime)
        self.model = None
        self.model_file = ""
        self.instance_name = ""
        self.executes = 0

    def route(self, message):
        """Handle what the thread reading messages got (see Inbox): a
        `bls_response`, `reply`, `cancel` or `release` at once; anything else
        (other messages, undecodable ones, end of input) is queued for the
        main thread. An `execute` is decoded here, so that a `cancel` routed
        before it is handled counts."""
        if type(message) is tuple:
            kind, payload = message
            try:
                if kind == RELEASE:
                    self.runtime.release_responses(messages.decode_release(payload))
                    return
                if kind == CANCEL:
                    self.runtime.cancel(messages.decode_cancel(payload))
                    return
                if kind == BLS_RESPONSE:
                    self.runtime.finish_bls(payload)
                    return
                if kind != EXECUTE:
                    raise ProtocolError(f"a message of unknown kind {kind}")
            except ProtocolError as error:
                self.runtime.log("error", f"ignored a bad message: {error}", __file__, 0)
                return
            try:
                message = messages.decode_execute(payload)
            except ProtocolError as error:
                message = error
            except Exception as error:
                message = ProtocolError(f"the execute message could not be read: {error!r}")
            else:
                self.runtime.track([request.key for request in message[1]])
        elif type(message) is dict:
            op = message.get("op")
            try:
                if op == "reply":
                    self.runtime.finish_call(message.get("tag"), message)
                    return
            except Exception as error:
                self.runtime.log("error", f"ignored a bad '{op}' frame: {error}", __file__, 0)
                return
        elif message is None:
            self.runtime.close(_CLOSED)
        self.requests.append(message)

    def serve(self):
        """Answer the server's requests until the worker must exit; returns
        the exit status."""
        handlers = {
            "auto_complete": self.auto_complete,
            "initialize": self.initialize,
            "finalize": self.finalize,
        }
        try:
            while True:
                self.inbox.wait(self.requests.__len__)
                message = self.requests.popleft()
                if message is None:
                    self.finalize_model()
                    return 0
                if isinstance(message, ProtocolError):
                    self.send_error(message)
                    continue
                if type(message) is tuple:
                    self.execute(*message)
                    continue
                handler = handlers.get(message.get("op"))
                if handler is None:
                    self.send_error(ProtocolError(f"unknown op {message.get('op')!r}"))
                    continue
                status = handler(message)
                if status is not None:
                    return status
        except ChannelClosed:
            self.finalize_model()
            return 1

    def send_error(self, error):
        self.writer.send(
            {
                "op": "error",
                "message": exception_line(error),
                "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
            }
        )

    def import_model(self, model_file):
        """Import model.py as Triton does: its folder and the folder above
        are appended to sys.path and it is loaded as module
        '<version>.<file name>'."""
        path = os.path.abspath(_expect(model_file, str, "'model_file'"))
        version_dir = os.path.dirname(path)
        file_name = os.path.basename(path)
        if not file_name.endswith(".py"):
            raise TritonModelException(
                f"Model name must end with '.py'. Model name is \"{file_name}\"."
            )
        if not os.path.isfile(path):
            raise TritonModelException(f"Python model file not found in '{path}'")
        for folder in (version_dir, os.path.dirname(version_dir)):
            if folder not in sys.path:
                sys.path.append(folder)
        module_name = f"{os.path.basename(version_dir)}.{file_name[:-3]}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        self.runtime.model_dir = version_dir
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module

    def auto_complete(self, message):
        try:
            config = _expect(message.get("config"), dict, "'config'")
            self.runtime.instance_name = str(config.get("name", ""))
            model_class = self.import_model(message.get("model_file")).TritonPythonModel
            model_config = ModelConfig(json.dumps(config))
            if hasattr(model_class, "auto_complete_config"):
                model_config = model_class.auto_complete_config(model_config)
            if not isinstance(model_config, ModelConfig):
                raise TritonModelException(
                    f"auto_complete_config function in model '{config.get('name', '')}' "
                    "must return a valid pb.ModelConfig object."
                )
            self.writer.send({"op": "config", "config": model_config.as_dict()})
            return 0
        except ChannelClosed:
            raise
        except _MODEL_ERRORS as error:
            self.send_error(error)
            return 1

    def initialize(self, message):
        if self.model is not None:
            self.send_error(ProtocolError("the model is already initialized"))
            return None
        try:
            args = _expect(message.get("args"), dict, "'args'")
            args = {
                str(key): value if isinstance(value, str) else json.dumps(value)
                for key, value in args.items()
            }
            self.instance_name = args.get("model_instance_name") or args.get("model_name", "")
            self.runtime.instance_name = self.instance_name
            self.runtime.decoupled = _is_decoupled(args.get("model_config"))
            self.model_file = os.path.abspath(_expect(message.get("model_file"), str, "'model_file'"))
            model = self.import_model(self.model_file).TritonPythonModel()
            if hasattr(model, "initialize"):
                model.initialize(args)
        except ChannelClosed:
            raise
        except _MODEL_ERRORS as error:
            self.send_error(error)
            return 1
        self.model = model
        self.runtime.initialized = True
        self.writer.send({"op": "ready"})
        return None

    def execute(self, read, entries):
        """Run the model on an execute message's requests and answer. A
        decoupled model's requests stay open past the answer until each has
        had its final flag, sent from any thread."""
        requests = []
        try:
            # The server has read these output messages: their memory is free.
            self.runtime.release_responses(read)
            self.executes += 1
            if self.executes % _PRUNE_EVERY == 0:
                self.runtime.files.prune()
            try:
                if self.model is None:
                    raise ProtocolError("execute before initialize")
                requests = self.build_requests(entries, self.runtime.cancelled)
            except Exception as error:
                self.send_error(error)
                return None
            try:
                answer, blocks = self.run_model(requests)
            except ChannelClosed:
                raise
            except _MODEL_ERRORS as error:
                # The server answers what is left of each request with this
                # error; the senders take nothing more.
                for request in requests:
                    request._closed = True
                text = str(error) if isinstance(error, ContractError) else triton_error_text(error)
                self.runtime.send_batch_error(self.failure(text))
            else:
                try:
                    self.runtime.send_outputs(RESPONSES, answer, blocks)
                except ProtocolError as error:
                    # Too large for the channel (parameters or error texts
                    # of many megabytes): the batch fails saying so.
                    self.runtime.send_batch_error(self.failure(error))
        finally:
            # Requests still open (a decoupled model's) are closed by their
            # final flag; the others are done.
            open_keys = {
                request._key for request in requests
                if self.runtime.decoupled and not request._closed
            }
            for entry in entries:
                if entry.key not in open_keys:
                    self.runtime.close_request(entry.key)
        return None

    def build_requests(self, entries, cancelled):
        files = self.runtime.files
        return [
            InferenceRequest._from_server(
                key=entry.key,
                inputs=[region_tensor(*tensor, files) for tensor in entry.inputs],
                request_id=entry.request_id,
                correlation_id=entry.correlation_id,
                flags=entry.flags,
                timeout=entry.timeout,
                parameters=entry.parameters,
                requested_output_names=entry.outputs,
                cancelled=cancelled,
            )
            for entry in entries
        ]

    def run_model(self, requests):
        """Call execute and encode its answer (a `responses` message), with
        the arena Blocks holding its outputs. A request answered through its
        response sender, or a decoupled model's, has no entry there. A
        decoupled model's `async def execute` runs on in the background, as
        in Triton."""
        if not hasattr(self.model, "execute"):
            raise ContractError(f"Python model {self.model_file} does not implement `execute` method.")
        result = self.model.execute(requests)
        if type(result) is not list and asyncio.iscoroutine(result):
            if self.runtime.decoupled:
                self.runtime.run_in_background(result, lambda error: self.fail_stream(requests, error))
                result = None
            else:
                result = self.runtime.run_coroutine(result)
        if result is None:
            result = [None] * len(requests)
        elif self.runtime.decoupled:
            raise ContractError(
                f"Python model '{self.instance_name}' is using the decoupled mode and the "
                "execute function must return None."
            )
        if not isinstance(result, list):
            raise ContractError(f"Expected a list in the execute return, found type '{type(result)}'.")
        if len(result) != len(requests):
            raise ContractError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                f"and InferenceResponse(s) size is:{len(result)}\n"
            )
        encoder = messages.Encoder()
        encoder.parts.append(struct.pack("<I", len(requests)))
        blocks = []
        try:
            for response, request in zip(result, requests):
                rescheduled = request._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
                if response is None:
                    if rescheduled:
                        request._closed = True
                        encoder.parts.append(messages.SLOT_RESCHEDULED)
                    else:
                        encoder.parts.append(messages.SLOT_KEPT)
                    continue
                if rescheduled:
                    raise ContractError(
                        "Expected a None object in the execute function return list for "
                        f"reschduled request, found type '{type(response)}'."
                    )
                if not isinstance(response, InferenceResponse):
                    raise ContractError(
                        "Expected an 'InferenceResponse' object in the execute function "
                        f"return list, found type '{type(response)}'."
                    )
                if request._closed:
                    raise ContractError(
                        "Unable to send response. Response sender has been closed."
                    )
                request._closed = True
                encoder.parts.append(messages.SLOT_ANSWERED)
                encoder.entry(response, request._requested_output_names, self.arena, blocks)
        except BaseException:
            self.arena.free(*blocks)
            raise
        return encoder.message(b"\0"), blocks

    def failure(self, text):
        """A failed batch's message, as Triton's stub words it."""
        return f"Failed to process the request(s) for model '{self.instance_name}', message: {text}"

    def fail_stream(self, requests, error):
        """A decoupled model's background `async def execute` raised: each
        request still open gets the error as its last response."""
        text = triton_error_text(error)
        message = self.failure(text)
        self.runtime.log("error", message, __file__, 0)
        response = InferenceResponse(error=TritonError(message, TritonError.INTERNAL))
        for request in requests:
            if not request._closed:
                request._closed = True
                try:
                    self.runtime.send_response(request._key, response, (), True)
                except ChannelClosed:
                    return

    def finalize(self, message):
        self.finalize_model()
        self.writer.send({"op": "finalized"})
        return 0

    def finalize_model(self):
        """Call the model's finalize (errors are logged, as Triton does)."""
        self.runtime.release_responses()
        model, self.model = self.model, None
        if model is None:
            return
        self.runtime.finalizing = True
        self.runtime.stop_loop()
        if hasattr(model, "finalize"):
            try:
                model.finalize()
            except _MODEL_ERRORS as error:
                self.runtime.log("error", f"finalize failed: {triton_error_text(error)}", __file__, 0)

    def terminate(self, signum, _frame):
        """SIGTERM: remove the arena files and exit at once."""
        self.arena.close()
        os._exit(128 + signum)


def take_over_stdio():
    """Keep the real stdin/stdout as the channel's doorbells only; returns
    their descriptors (two pipes, or one socket twice). Afterwards
    fd 1 is stderr, so model prints (Python's or a C library's) land in the
    server's log, and fd 0 is /dev/null, so nothing in the model can eat a
    frame."""
    sys.stdout.flush()
    reader, writer = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if sys.stdout is not None:
        sys.stdout.reconfigure(line_buffering=True)
    return reader, writer


def side_channel():
    """The writer for side frames on the descriptor the server names in
    NEREID_SIDE_FD (see README.md), or None: they then go to stdout."""
    fd = os.environ.pop("NEREID_SIDE_FD", "")
    if not fd.isdigit():
        return None
    fd = int(fd)
    os.set_inheritable(fd, False)  # not for the model's own subprocesses
    return FrameWriter(fd)


def channel(doorbell_in, doorbell_out):
    """The channel to the server, on the descriptor NEREID_CHANNEL_FD names."""
    fd = os.environ.pop("NEREID_CHANNEL_FD", "")
    if not fd.isdigit():
        raise SystemExit("nereid_worker: NEREID_CHANNEL_FD names no channel; the Nereid server starts this program")
    if not supported():
        raise SystemExit(
            "nereid_worker: the shared-memory channel needs an x86-64 machine "
            f"(this is {platform.machine()})"
        )
    return Channel(int(fd), doorbell_in, doorbell_out)


def main():
    doorbell_in, doorbell_out = take_over_stdio()
    link = channel(doorbell_in, doorbell_out)
    worker = Worker(link.reader, link.writer, side_channel())
    # As Triton's stub: Ctrl-C in the server's terminal must not kill the
    # model before the server finalizes it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, worker.terminate)
    try:
        status = worker.serve()
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        worker.arena.close()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    # Exit now: threads a model left running must not keep the process alive.
    os._exit(status)


if __name__ == "__main__":
    main()

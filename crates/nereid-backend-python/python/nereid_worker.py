"""Nereid's Python-backend worker.

Runs one instance of a Triton Python-backend model (a `model.py` defining
`class TritonPythonModel`) for the Nereid server, which starts it as
`python nereid_worker.py` with this folder on PYTHONPATH and speaks the
protocol described in README.md: length-prefixed JSON frames on stdin and
stdout, tensor bytes in shared-memory files.

Two threads matter: the reader thread reads every frame and handles the two
that may arrive while the model runs (`bls_response`, `cancel`); the main
thread takes the others from a queue and runs the model.
"""

import asyncio
import concurrent.futures
import importlib.util
import json
import os
import queue
import signal
import sys
import threading
import traceback

from nereid_pb import runtime
from nereid_pb.shm import InputFiles, OutputArena
from nereid_pb.wire import ChannelClosed, FrameChannel, ProtocolError, read_tensor, write_tensors
from triton_python_backend_utils import (
    InferenceRequest,
    InferenceResponse,
    ModelConfig,
    TritonModelException,
)

# What a model may raise out of its methods (SystemExit included, as Triton
# reports any Python exception).
_MODEL_ERRORS = (Exception, SystemExit)

_HERE = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_CODE = (
    os.path.join(_HERE, "nereid_pb") + os.sep,
    os.path.join(_HERE, "nereid_worker.py"),
    os.path.join(_HERE, "triton_python_backend_utils.py"),
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(concurrent.futures.__file__) + os.sep,
    threading.__file__,
)


class ContractError(Exception):
    """`execute` broke Triton's contract (wrong return value). Triton words
    these without exception type or traceback."""


class _BadFrame:
    """A frame the reader could not decode, for the main thread to answer."""

    def __init__(self, error):
        self.error = error


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


def _expect(value, kinds, what):
    """`value` if it is one of `kinds` (a bool is not an int here), else
    ProtocolError."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ProtocolError(f"{what} has the wrong type ({type(value).__name__})")
    return value


class Worker:
    """The model instance and the protocol handlers around it."""

    def __init__(self, channel):
        self.channel = channel
        self.arena = OutputArena()
        self.runtime = runtime.Runtime(channel, self.arena, InputFiles())
        runtime.install(self.runtime)
        self.inbox = queue.Queue()
        self.model = None
        self.model_file = ""
        self.instance_name = ""
        self.response_blocks = []
        self.loop = None

    # Reader thread ------------------------------------------------------------

    def read_frames(self):
        """Read frames until end of input; route `bls_response` and `cancel`
        at once, queue the rest for the main thread."""
        while True:
            try:
                message = self.channel.receive()
            except ProtocolError as error:
                self.inbox.put(_BadFrame(error))
                continue
            except (OSError, ValueError):
                message = None
            if message is None:
                self.runtime.close("The connection to the Nereid server was closed.")
                self.inbox.put(None)
                return
            op = message.get("op")
            try:
                if op == "bls_response":
                    self.runtime.finish_bls(message.get("tag"), message.get("response"))
                elif op == "cancel":
                    ids = _expect(message.get("request_ids"), list, "cancel 'request_ids'")
                    self.runtime.cancel([str(key) for key in ids])
                else:
                    if op == "execute":
                        self._track(message)
                    self.inbox.put(message)
            except Exception as error:
                self.runtime.log("error", f"ignored a bad '{op}' frame: {error}", __file__, 0)

    def _track(self, message):
        """Register cancellation flags for an execute frame's requests."""
        entries = message.get("requests")
        if isinstance(entries, list) and all(isinstance(entry, dict) for entry in entries):
            keys = [str(entry.get("id", "")) for entry in entries]
            message["_cancel"] = (keys, self.runtime.track(keys))

    # Main thread --------------------------------------------------------------

    def serve(self):
        """Answer queued frames until the worker must exit; returns the exit
        status."""
        handlers = {
            "auto_complete": self.auto_complete,
            "initialize": self.initialize,
            "execute": self.execute,
            "finalize": self.finalize,
        }
        try:
            while True:
                message = self.inbox.get()
                if message is None:
                    self.finalize_model()
                    return 0
                if isinstance(message, _BadFrame):
                    self.send_error(message.error)
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
        self.channel.send(
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
            model_class = self.import_model(message.get("model_file")).TritonPythonModel
            model_config = ModelConfig(json.dumps(config))
            if hasattr(model_class, "auto_complete_config"):
                model_config = model_class.auto_complete_config(model_config)
            if not isinstance(model_config, ModelConfig):
                raise TritonModelException(
                    f"auto_complete_config function in model '{config.get('name', '')}' "
                    "must return a valid pb.ModelConfig object."
                )
            self.channel.send({"op": "config", "config": model_config.as_dict()})
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
        self.channel.send({"op": "ready"})
        return None

    def execute(self, message):
        keys, flags = message.pop("_cancel", ([], []))
        try:
            self.release_response_blocks()
            self.runtime.files.prune()
            try:
                if self.model is None:
                    raise ProtocolError("execute before initialize")
                requests = self.build_requests(message, flags)
            except Exception as error:
                self.send_error(error)
                return None
            try:
                reply = {"op": "responses", "responses": self.run_model(requests), "error": None}
            except ChannelClosed:
                raise
            except _MODEL_ERRORS as error:
                self.release_response_blocks()
                text = str(error) if isinstance(error, ContractError) else triton_error_text(error)
                failure = (
                    f"Failed to process the request(s) for model '{self.instance_name}', "
                    f"message: {text}"
                )
                reply = {"op": "responses", "responses": None,
                         "error": {"message": failure, "code": "INTERNAL"}}
            self.channel.send(reply)
        finally:
            self.runtime.untrack(keys, flags)
        return None

    def build_requests(self, message, flags):
        entries = _expect(message.get("requests"), list, "execute 'requests'")
        if len(flags) != len(entries):
            raise ProtocolError("execute 'requests' must be a list of objects")
        requests = []
        for index, (entry, flag) in enumerate(zip(entries, flags)):
            what = f"request {index}"
            key = str(entry.get("id", ""))
            inputs = [
                read_tensor(descriptor, self.runtime.files, copy=False)
                for descriptor in _expect(entry.get("inputs", []), list, f"{what} 'inputs'")
            ]
            requests.append(
                InferenceRequest._from_server(
                    inputs=inputs,
                    request_id=_expect(entry.get("request_id", key), str, f"{what} 'request_id'"),
                    correlation_id=_expect(entry.get("correlation_id", 0), (int, str), f"{what} 'correlation_id'"),
                    flags=_expect(entry.get("flags", 0), int, f"{what} 'flags'"),
                    timeout=_expect(entry.get("timeout", 0), int, f"{what} 'timeout'"),
                    parameters=_expect(entry.get("parameters") or {}, dict, f"{what} 'parameters'"),
                    requested_output_names=[
                        _expect(name, str, f"{what} requested output name")
                        for name in _expect(entry.get("requested_output_names", []), list, what)
                    ],
                    cancel_flag=flag,
                )
            )
        return requests

    def run_model(self, requests):
        """Call execute and encode its responses (the answer's 'responses')."""
        if not hasattr(self.model, "execute"):
            raise ContractError(f"Python model {self.model_file} does not implement `execute` method.")
        result = self.model.execute(requests)
        if asyncio.iscoroutine(result):
            result = self.run_coroutine(result)
        if not isinstance(result, list):
            raise ContractError(f"Expected a list in the execute return, found type '{type(result)}'.")
        if len(result) != len(requests):
            raise ContractError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                f"and InferenceResponse(s) size is:{len(result)}\n"
            )
        for response in result:
            if not isinstance(response, InferenceResponse):
                raise ContractError(
                    "Expected an 'InferenceResponse' object in the execute function "
                    f"return list, found type '{type(response)}'."
                )
        return [self.encode_response(response, request) for response, request in zip(result, requests)]

    def run_coroutine(self, coroutine):
        """Run an `async def execute` to completion on the instance's event
        loop, which lives in a daemon thread for the worker's lifetime (as in
        Triton), so tasks a model leaves behind keep running."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, name="nereid-asyncio", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def encode_response(self, response, request):
        parameters = json.loads(response.parameters())
        if response.has_error():
            error = response.error()
            return {
                "outputs": [],
                "error": {"message": error.message(), "code": error.code().name},
                "parameters": parameters,
            }
        wanted = request.requested_output_names()
        tensors = [tensor for tensor in response.output_tensors() if tensor.name() in wanted]
        descriptors, blocks = write_tensors(tensors, self.arena)
        self.response_blocks.extend(blocks)
        return {"outputs": descriptors, "error": None, "parameters": parameters}

    def release_response_blocks(self):
        """Free the last answer's output regions: the server has copied them
        before sending the frame now being handled."""
        for block in self.response_blocks:
            self.arena.free(block)
        self.response_blocks = []

    def finalize(self, message):
        self.finalize_model()
        self.channel.send({"op": "finalized"})
        return 0

    def finalize_model(self):
        """Call the model's finalize (errors are logged, as Triton does)."""
        self.release_response_blocks()
        model, self.model = self.model, None
        if model is None:
            return
        self.runtime.finalizing = True
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
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
    """Keep the real stdin/stdout for frames only. Afterwards fd 1 is
    stderr, so model prints (Python's or a C library's) land in the server's
    log, and fd 0 is /dev/null, so nothing in the model can eat a frame."""
    sys.stdout.flush()
    reader = os.fdopen(os.dup(0), "rb")
    writer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if sys.stdout is not None:
        sys.stdout.reconfigure(line_buffering=True)
    return reader, writer


def main():
    reader, writer = take_over_stdio()
    worker = Worker(FrameChannel(reader, writer))
    # As Triton's stub: Ctrl-C in the server's terminal must not kill the
    # model before the server finalizes it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, worker.terminate)
    threading.Thread(target=worker.read_frames, name="nereid-reader", daemon=True).start()
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

"""Worker-side state that pb_utils objects reach while a model runs.

pb_utils calls that need the server (BLS `exec` and `async_exec`, `Logger`,
`is_cancelled`, custom metrics, the model control calls) go through the one
Runtime the worker installs at start-up. Outside a worker (say, a model's
unit tests importing triton_python_backend_utils) there is none: Logger
writes to stderr, BLS raises as it does outside `execute`, and the others
raise.

Log lines, custom metrics and model control travel on the side channel
(README.md, "Side channel"), which the server reads at any time; a `call`
there waits for the server's `reply`, which arrives on the main channel.

Threads: the main thread runs the model; whichever thread reads messages (see
inbox.py) calls `finish_bls`, `finish_call`, `cancel`, `track` and `close`;
any model thread may start BLS calls, make calls or log. Shared state is
guarded by one lock.
"""

import asyncio
import collections
import itertools
import sys
import threading

from . import messages
from .channel import BLS, BLS_RELEASE, RESPONSE, RESPONSES
from .errors import ErrorCode, TritonError
from .wire import ChannelClosed, ProtocolError, region_tensor

_current = None


def install(runtime):
    """Make `runtime` the one pb_utils uses (the worker does this once)."""
    global _current
    _current = runtime


def current():
    """The installed Runtime, or None outside a worker."""
    return _current


def _error_code(name):
    """The ErrorCode named `name` on the wire; INTERNAL when absent or unknown."""
    if isinstance(name, str):
        return ErrorCode.__members__.get(name, ErrorCode.INTERNAL)
    return ErrorCode.INTERNAL


def _parameters(parameters):
    """Response parameters from the wire as a dict ({} when absent)."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise ValueError("'parameters' is not an object")
    return parameters


class CallFailed(Exception):
    """A call on the side channel failed; `str()` is Triton's wording, to
    which each pb_utils call puts its own prefix."""


class Runtime:
    """The channel to the server, the output arena, the server's files, BLS
    calls in flight, the cancellation state of the requests being executed,
    and the event loop of `async def execute`."""

    def __init__(self, writer, inbox, arena, files, side=None):
        self.writer = writer
        # Side frames go on a channel of their own when the server gave one.
        self.side = side if side is not None else writer
        self.inbox = inbox
        self.arena = arena
        self.files = files
        self.initialized = False
        self.finalizing = False
        self.model_dir = None
        self.loop = None
        self._lock = threading.Lock()
        self._tags = itertools.count(1)
        self._pending = {}  # tag -> (deliver, the Block of the call's inputs)
        self._calls = {}  # tag -> the list the call's reply is put in
        # Side frames sent from where waiting is not allowed (a __del__),
        # while the side channel was busy: sent with the next side frame.
        self._deferred = collections.deque()
        # Who makes calls, for the messages of failed calls (Triton's stub
        # names the instance).
        self.instance_name = ""
        # Ids of the requests in flight (their execute runs, or a decoupled
        # one's final flag is yet to come), and those the server cancelled.
        self._live = set()
        self.cancelled = set()
        self._closed_reason = None
        # Whether the model is decoupled (its config's model_transaction_policy).
        self.decoupled = False
        # Frames carrying response outputs (`response`, `responses`) are
        # numbered in the order they are written; the arena Blocks of each
        # are freed once the server says it has read that many (`release`).
        self._output_frames = 0
        self._output_lock = threading.Lock()  # numbering and writing them
        self._unreleased = collections.deque()  # (frame number, [Block, ...])
        self._unreleased_lock = threading.Lock()

    # Responses -----------------------------------------------------------------

    def send_response(self, key, response, wanted, final, note=False):
        """Send a `response` message for request `key`: an InferenceResponse
        (its outputs among `wanted`, written to the arena) or None for the
        final flag alone. `note` marks a final flag the worker sent itself.
        A final flag ends the request's tracking."""
        encoder = messages.Encoder()
        blocks = []
        if response is None:
            encoder.parts.append(b"\0")
        else:
            encoder.parts.append(b"\1")
            encoder.entry(response, wanted, self.arena, blocks)
        head = messages.response_head(key, final, note)
        self.send_outputs(RESPONSE, encoder.message(head), blocks)
        if final:
            self.close_request(key)

    def send_outputs(self, kind, payload, blocks):
        """Send a message that carries response outputs (`responses`,
        `response`), numbering it so that its Blocks are freed when the
        server has read it (`release`)."""
        with self._output_lock:
            number = self._output_frames
            self._output_frames += 1
            if blocks:
                with self._unreleased_lock:
                    self._unreleased.append((number, list(blocks)))
            # Written under the lock, so messages reach the server in the
            # order of their numbers.
            try:
                self.writer.send_message(kind, payload)
            except BaseException:
                if blocks:
                    with self._unreleased_lock:
                        self._unreleased = collections.deque(
                            entry for entry in self._unreleased if entry[0] != number
                        )
                    self.arena.free(*blocks)
                raise

    def send_batch_error(self, message):
        """Fail every request of the running execute with `message`."""
        self.send_outputs(RESPONSES, messages.batch_error(message), [])

    def release_responses(self, read=None):
        """Free the Blocks of the output messages the server has read: the
        first `read` of them, or all sent so far (None)."""
        blocks = []
        with self._unreleased_lock:
            while self._unreleased and (read is None or self._unreleased[0][0] < read):
                blocks.extend(self._unreleased.popleft()[1])
        self.arena.free(*blocks)

    def log(self, level, message, filename, line):
        """Send a log frame; level is "info", "warn", "error" or "verbose".
        Once the server is gone, the line goes to stderr instead: logging
        never fails a model."""
        try:
            self.send_side(
                {"op": "log", "level": level, "message": message, "file": filename, "line": line}
            )
        except ChannelClosed:
            sys.stderr.write(f"[{level}] {message}\n")

    # Side channel -------------------------------------------------------------

    def send_side(self, message):
        """Send a side frame (after any deferred ones)."""
        self._flush_deferred()
        self.side.send(message)

    def notify(self, message):
        """Send a side frame that gets no answer, from anywhere, a __del__
        included: never waits for a lock. When the side channel is busy
        (maybe in this very thread) the frame goes with the next one."""
        self._deferred.append(message)
        self._flush_deferred()

    def _flush_deferred(self):
        while self._deferred:
            try:
                message = self._deferred.popleft()
            except IndexError:
                return
            try:
                sent = self.side.try_send(message)
            except ChannelClosed:
                return
            if not sent:
                self._deferred.appendleft(message)
                return

    def call(self, op, fields):
        """Send the side frame `op` with `fields` and wait for the server's
        `reply`; returns it (a dict). A failed call raises CallFailed with
        Triton's words ("Failed to process the request for model ...")."""
        slot = []
        with self._lock:
            if self._closed_reason is not None:
                raise CallFailed(self.failure(self._closed_reason))
            tag = next(self._tags)
            self._calls[tag] = slot
        try:
            self.send_side({"op": op, "tag": tag, **fields})
        except ChannelClosed as error:
            with self._lock:
                self._calls.pop(tag, None)
            raise CallFailed(self.failure(str(error))) from None
        self.inbox.wait(slot.__len__)
        reply = slot[0]
        error = reply.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            raise CallFailed(self.failure(message if isinstance(message, str) else str(error)))
        return reply

    def finish_call(self, tag, reply):
        """Handle a `reply` (reading thread): wake the call waiting for it."""
        with self._lock:
            slot = self._calls.pop(tag, None)
        if slot is None:
            self.log("error", f"reply for unknown tag {tag!r} ignored", __file__, 0)
            return
        slot.append(reply)

    def failure(self, message):
        """A failed call's message as Triton's stub words it."""
        return (
            f"Failed to process the request for model '{self.instance_name}', "
            f"message: {message}"
        )

    # Cancellation -----------------------------------------------------------

    def track(self, keys):
        """The requests of an execute frame, as it is routed: from now on a
        `cancel` naming one of them is kept (so one routed before the frame
        is handled still counts) until `close_request`."""
        with self._lock:
            self._live.update(keys)

    def close_request(self, key):
        """Request `key` is done: its execute returned (a model that is not
        decoupled) or it had its final flag; a later `cancel` is ignored."""
        with self._lock:
            self._live.discard(key)
            self.cancelled.discard(key)

    def cancel(self, keys):
        """Record that the server cancelled the requests with these ids; ids
        of requests that are done are ignored."""
        with self._lock:
            self.cancelled.update(key for key in keys if key in self._live)

    # Event loop ---------------------------------------------------------------

    def run_coroutine(self, coroutine):
        """Run an `async def execute` to completion on the instance's event
        loop, which lives in a daemon thread for the worker's lifetime (as in
        Triton), so tasks a model leaves behind keep running. This thread
        reads frames meanwhile, so that `async_exec` gets its answers."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())
        future.add_done_callback(lambda _future: self.inbox.wake())
        self.inbox.wait(future.done, wakeable=True)
        return future.result()

    def run_in_background(self, coroutine, failed):
        """Start an `async def execute` of a decoupled model on the event
        loop and return at once; `failed(error)` is called if it raises."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())

        def done(future):
            error = future.exception()
            if error is not None:
                failed(error)

        future.add_done_callback(done)

    def _event_loop(self):
        """The instance's event loop, started in its daemon thread the first
        time it is needed."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(
                target=self.loop.run_forever, name="nereid-asyncio", daemon=True
            ).start()
        return self.loop

    def stop_loop(self):
        """Stop the event loop (at finalize), if there is one."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)

    # BLS ----------------------------------------------------------------------

    def start_bls(self, request, deliver, decoupled=False):
        """Write the request's inputs to the arena and send a `bls` message.
        `deliver(parts)` is called exactly once, with a list of responses
        (one, unless `decoupled`), each as (output Tensors, TritonError or
        None, parameters): by the thread that reads the answer, or from here
        if sending fails. The caller makes pb_utils responses of them, so
        that this module needs none of inference.py, which imports it."""
        tag = None
        block = None
        try:
            encoder = messages.Encoder()
            block = encoder.tensors(request.inputs(), self.arena)
            with self._lock:
                if self._closed_reason is not None:
                    raise ConnectionError(self._closed_reason)
                tag = next(self._tags)
                self._pending[tag] = (deliver, block)
            head = messages.bls_head(tag, decoupled, request)
            self.writer.send_message(BLS, encoder.message(head))
        except Exception as error:
            with self._lock:
                owned = tag is None or self._pending.pop(tag, None) is not None
            if owned:
                if block is not None:
                    self.arena.free(block)
                deliver([([], TritonError(str(error)), {})])

    def finish_bls(self, payload):
        """Handle a `bls_response` message (reading thread): copy the
        outputs out of the server's file, tell the server it may reuse that
        memory (`bls_release`), then hand the responses to the waiting
        caller."""
        try:
            tag, entries = messages.decode_bls_response(payload)
        except ProtocolError as error:
            self.log("error", f"ignored a bad bls_response: {error}", __file__, 0)
            return
        with self._lock:
            pending = self._pending.pop(tag, None)
        if pending is None:
            self.log("error", f"bls_response for unknown tag {tag!r} ignored", __file__, 0)
            parts = None
        else:
            deliver, block = pending
            if block is not None:
                self.arena.free(block)
            try:
                parts = [self._bls_part(*entry) for entry in entries]
            except Exception as error:
                parts = [([], TritonError(f"Nereid could not read the BLS response: {error}"), {})]
        try:
            self.writer.send_message(BLS_RELEASE, messages.tag(tag))
        except ChannelClosed:
            pass
        if parts is not None:
            deliver(parts)

    def _bls_part(self, outputs, error, parameters):
        """One response of a BLS answer: its Tensors (copied: the server
        reuses their memory after `bls_release`), TritonError and
        parameters."""
        if error is not None:
            message, code = error
            return [], TritonError(message, _error_code(code)), parameters
        tensors = [region_tensor(*output, self.files, copy=True) for output in outputs]
        return tensors, None, parameters

    def close(self, reason):
        """The server is gone (end of input): fail every BLS call in flight,
        and any started later, with `reason`."""
        with self._lock:
            self._closed_reason = reason
            pending, self._pending = self._pending, {}
            calls, self._calls = self._calls, {}
        for deliver, _block in pending.values():
            deliver([([], TritonError(reason), {})])
        for slot in calls.values():
            slot.append({"error": {"message": reason}})

"""The channel to the server: two rings of messages in one shared-memory
file (the descriptor NEREID_CHANNEL_FD names), with the worker's stdin and
stdout pipes as doorbells. README.md ("Channel") is the reference; the
server's side is src/channel.rs.

A ring has one producer and one consumer at a time. The producer writes a
record (u32 length, u32 kind, the payload padded to 8 bytes) and publishes
it by moving `head` on; the consumer reads up to `head` and moves `tail`
on. A consumer that finds its ring empty sets `sleeping`, looks once more
and then blocks on its doorbell; a producer writes a doorbell byte only
when it sees `sleeping` set. So a message to a side that is running costs
no system call, and one to a side that sleeps costs one: the producer
clears `sleeping` as it rings, so the messages after it, which the woken
side reads in the same go, cost none.

The words are read and written through a memoryview cast to unsigned 64-
and 32-bit items, which CPython copies with one aligned load or store; the
rings rely on x86-64's ordering of those (stores are seen in the order they
are made, loads are not moved before earlier loads) and on a full barrier
between setting `sleeping` and looking again, which an uncontended lock's
acquire and release make (both are locked instructions).
"""

import mmap
import os
import platform
import select
import struct
import threading
import time

from .wire import ChannelClosed, ProtocolError, decode_json, to_json

CAPACITY = 1 << 20
MAX_MESSAGE = CAPACITY // 2 - 8
_CONTROL = 4096
_WRAP = 0xFFFFFFFF
_MAGIC = int.from_bytes(b"NRDCHAN1", "little")
_RECORD = struct.Struct("<II")

# Record kinds (src/message.rs).
JSON, EXECUTE, RESPONSES, RESPONSE, RELEASE, CANCEL, BLS, BLS_RESPONSE, BLS_RELEASE = range(1, 10)

_BARRIER = threading.Lock()


def _fence():
    """A full memory barrier (see the module docstring)."""
    _BARRIER.acquire()
    _BARRIER.release()


def supported():
    """Whether this machine orders memory as the rings need without
    barriers Python has no way to make (x86-64)."""
    return platform.machine().lower() in ("x86_64", "amd64")


class _Ring:
    """One ring's words (`head`, `tail`, `sleeping`, in 64-bit units of the
    control page) and data."""

    def __init__(self, words, data, header):
        self._words = words
        self.data = data
        self.head = header // 8
        self.tail = header // 8 + 8
        self.sleeping = header // 8 + 16


class Channel:
    """The mapped file of the channel; `reader` and `writer` are the
    worker's ends of it (with `server`, the server's: the tests' harness)."""

    def __init__(self, fd, doorbell_in, doorbell_out, server=False):
        size = os.fstat(fd).st_size
        if size < _CONTROL + 2 * CAPACITY:
            raise ProtocolError(f"the channel file is {size} bytes, too small")
        self._map = mmap.mmap(fd, _CONTROL + 2 * CAPACITY)
        os.close(fd)
        view = memoryview(self._map)
        words = view[:_CONTROL].cast("Q")
        if words[0] != _MAGIC:
            raise ProtocolError("the channel file does not start with Nereid's magic")
        down = _Ring(words, view[_CONTROL:_CONTROL + CAPACITY], 64)
        up = _Ring(words, view[_CONTROL + CAPACITY:_CONTROL + 2 * CAPACITY], 256)
        if server:
            down, up = up, down
        self.reader = ChannelReader(words, down, doorbell_in)
        self.writer = ChannelWriter(words, up, doorbell_out)


def create_file():
    """A new channel file (a memfd), as the server makes one; its fd."""
    fd = os.memfd_create("nereid-channel")
    os.ftruncate(fd, _CONTROL + 2 * CAPACITY)
    os.pwrite(fd, _MAGIC.to_bytes(8, "little"), 0)
    return fd


class ChannelReader:
    """The worker's end of the down ring. `take` returns the next message
    without a system call; whoever waits for more calls `arm` first (a
    message that came meanwhile makes it true: then do not wait), then
    `fill` (or polls `fd`, then `fill`), which takes the doorbell's bytes.
    Not thread-safe: the Inbox lets one thread read at a time."""

    def __init__(self, words, ring, fd):
        self._words = words
        self._ring = ring
        self.fd = fd

    def take(self):
        """The next message, or None: a JSON record's object (a dict), or
        (kind, payload bytes) for a binary one. A JSON record that is not
        an object raises ProtocolError; the messages after it stay
        readable."""
        words, ring = self._words, self._ring
        tail = words[ring.tail]
        while True:
            head = words[ring.head]
            if tail == head:
                return None
            position = tail % CAPACITY
            length, kind = _RECORD.unpack_from(ring.data, position)
            if length == _WRAP:
                tail += CAPACITY - position
                words[ring.tail] = tail
                continue
            need = (8 + length + 7) & ~7
            if length > MAX_MESSAGE or need > head - tail or position + need > CAPACITY:
                raise ChannelClosed(f"the server wrote a broken record ({length} bytes at {position})")
            payload = bytes(ring.data[position + 8:position + 8 + length])
            words[ring.tail] = tail + need
            if kind == JSON:
                return decode_json(payload)
            return kind, payload

    def arm(self):
        """Say this side is about to sleep; True when a message is there
        after all (this side then stays awake)."""
        words, ring = self._words, self._ring
        words[ring.sleeping] = 1
        _fence()
        if words[ring.head] != words[ring.tail]:
            words[ring.sleeping] = 0
            return True
        return False

    def disarm(self):
        self._words[self._ring.sleeping] = 0

    def fill(self):
        """Block until the doorbell rings (after `arm`); False at its end,
        when the server is gone."""
        try:
            data = os.read(self.fd, 64)
        except OSError:
            data = b""
        self.disarm()
        return bool(data)


class ChannelWriter:
    """The worker's end of the up ring. Thread-safe: the main thread,
    response senders and BLS callers all write."""

    def __init__(self, words, ring, fd):
        self._words = words
        self._ring = ring
        self._fd = fd
        self._lock = threading.Lock()

    def send_message(self, kind, payload):
        """Publish one binary message and wake the server if it sleeps."""
        with self._lock:
            self._send(kind, payload)

    def send(self, message):
        """Send a JSON message (a dict)."""
        payload = to_json(message).encode("utf-8")
        with self._lock:
            self._send(JSON, payload)

    def try_send(self, message):
        """Send a JSON message unless another send holds the ring (maybe the
        calling thread itself, from a __del__); whether it was sent."""
        payload = to_json(message).encode("utf-8")
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._send(JSON, payload)
        finally:
            self._lock.release()
        return True

    def _send(self, kind, payload):
        length = len(payload)
        if length > MAX_MESSAGE:
            raise ProtocolError(f"a message of {length} bytes is over the channel's {MAX_MESSAGE}-byte limit")
        words, ring = self._words, self._ring
        need = (8 + length + 7) & ~7
        head = words[ring.head]
        position = head % CAPACITY
        to_end = CAPACITY - position
        start = head
        if need > to_end:
            start = head + to_end
        self._wait_for_room(head, start + need - head)
        if start != head:
            _RECORD.pack_into(ring.data, position, _WRAP, 0)
            position = 0
        _RECORD.pack_into(ring.data, position, length, kind)
        ring.data[position + 8:position + 8 + length] = payload
        words[ring.head] = start + need
        _fence()
        if words[ring.sleeping]:
            # Cleared here, so that the messages after this one, which the
            # woken side reads in the same go, ring no more.
            words[ring.sleeping] = 0
            try:
                os.write(self._fd, b"\1")
            except OSError as error:
                raise ChannelClosed(f"cannot wake the Nereid server: {error}") from error

    def _wait_for_room(self, head, total):
        words, ring = self._words, self._ring
        delay = 0.0001
        while head + total - words[ring.tail] > CAPACITY:
            # The server takes messages whenever a request runs or is open;
            # a full ring means it is busy, or gone.
            poller = select.poll()
            poller.register(self._fd, 0)
            if poller.poll(0):
                raise ChannelClosed("cannot write to the Nereid server: it is gone")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

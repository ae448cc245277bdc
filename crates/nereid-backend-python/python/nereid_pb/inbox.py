"""Messages from the server, read by whichever thread needs one.

The worker has no reader thread. A thread that must wait for something a
frame brings (the main thread for its next request, a model thread for its
BLS answer, the main thread while an `async def execute` runs) calls
`Inbox.wait(ready)`. One waiting thread at a time, the leader, reads messages
and routes every one of them, whichever thread it concerns; the others sleep
on a condition variable. When the leader's own `ready()` turns true it stops
reading and one of the others takes over (leader/follower). `poll_now`
routes messages that are already there, without a system call, so that
`is_cancelled()` sees a `cancel` while the model computes.

What `route` receives, in the order the server sent it: each message (a
dict for a JSON one, (kind, payload) for a binary one), a ProtocolError for
a JSON record that is not an object, and None
once at end of input. It runs in the reading thread, outside the Inbox's
lock, and must not raise. A thread that makes some `ready()` true other than
by routing a frame (a finished `async def execute`) calls `wake`, which
interrupts a reader that waits with `wakeable`.
"""

import os
import select
import threading

from .wire import ProtocolError


class Inbox:
    """Leader/follower reading of a ChannelReader; see the module docstring."""

    def __init__(self, reader, route):
        self._reader = reader
        self._route = route
        self._cond = threading.Condition(threading.Lock())
        self._leader = None  # the ident of the thread reading, if any
        self._followers = 0  # threads sleeping in wait()
        self._closed = False  # end of input was routed
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._poller = select.poll()
        self._poller.register(reader.fd, select.POLLIN)
        self._poller.register(self._wake_read, select.POLLIN)

    def wait(self, ready, wakeable=False):
        """Return once `ready()` is true, reading and routing frames while no
        other thread does. `ready` is called under the Inbox's lock: it must be
        quick and must not call the Inbox. Pass `wakeable` when something
        other than a routed frame can make `ready()` true (and calls `wake`);
        otherwise this thread, when it reads, blocks in a plain read."""
        with self._cond:
            while not ready():
                if self._leader is None and not self._closed:
                    self._lead(-1 if wakeable else None)
                else:
                    self._followers += 1
                    try:
                        self._cond.wait()
                    finally:
                        self._followers -= 1

    def poll_now(self):
        """Route the frames that have arrived, without waiting; nothing to do
        when another thread is reading (it routes them as they come)."""
        with self._cond:
            if self._leader is None and not self._closed:
                self._lead(0)

    def wake(self):
        """Make waiting threads check their `ready()` again, the reading one
        included."""
        with self._cond:
            if self._followers:
                self._cond.notify_all()
            leader = self._leader
        if leader is not None and leader != threading.get_ident():
            try:
                os.write(self._wake_write, b"\0")
            except BlockingIOError:
                pass  # the pipe is full, so the reader is woken anyway

    def _lead(self, timeout):
        """Read and route frames once as the leader (see `_pump`); entered
        and left with the lock held, which is released meanwhile. The caller
        stays leader as long as it keeps calling this without releasing the
        lock in between."""
        self._leader = threading.get_ident()
        self._cond.release()
        try:
            self._pump(timeout)
        finally:
            self._cond.acquire()
            self._leader = None
            if self._followers:
                self._cond.notify_all()

    def _pump(self, timeout):
        """Route the messages already there. If there are none, wait once
        and route what came: with `timeout` None, in a blocking read of the
        doorbell (which `wake` cannot cut short); with 0, not at all;
        otherwise after polling the doorbell and the wake-up pipe for up to
        `timeout` ms (negative: no limit), if the doorbell rang."""
        if self._route_buffered() or timeout == 0:
            return
        if self._reader.arm():
            self._route_buffered()
            return
        readable = timeout is None
        if not readable:
            for fd, _events in self._poller.poll(timeout):
                if fd == self._wake_read:
                    try:
                        os.read(self._wake_read, 4096)
                    except BlockingIOError:
                        pass
                else:
                    readable = True
        if not readable:
            self._reader.disarm()
            return
        if not self._reader.fill():
            with self._cond:
                self._closed = True
            self._route(None)
            return
        self._route_buffered()

    def _route_buffered(self):
        """Route every message waiting; whether there was one."""
        routed = False
        while True:
            try:
                message = self._reader.take()
            except ProtocolError as error:
                message = error
            if message is None:
                return routed
            self._route(message)
            routed = True

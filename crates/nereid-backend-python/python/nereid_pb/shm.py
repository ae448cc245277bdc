"""Shared-memory files: the server's (read) and the worker's arena (written).

Tensor bytes never travel through the pipe. The server writes inputs (and
BLS outputs) into files it owns and sends (path, offset, size); the worker
maps those read-only, once per file, remaps when the file grows or is
replaced, and drops mappings of removed files at each execute. The worker
writes outputs (and BLS inputs) into its own arena, files named
/dev/shm/nereid-py-<pid>-<n>, mode 0600, and answers with descriptors into
them.

Arena lifetime rules (see README.md): a region holding response outputs is
free once the next `execute` or `finalize` arrives (the server has copied the
bytes out by then); a region holding BLS inputs is free once that call's
`bls_response` arrives. When the current file is too small, a larger one is
created; a file that is no longer current is unlinked as soon as none of its
regions is live.
"""

import bisect
import itertools
import mmap
import os
import threading

import numpy as np

_ALIGNMENT = 64
_INITIAL_ARENA_BYTES = 1 << 20


class InputFiles:
    """Read-only mappings of server-owned files, cached by path."""

    def __init__(self):
        self._maps = {}
        self._lock = threading.Lock()

    def region(self, path, offset, size):
        """A read-only memoryview of `size` bytes at `offset` in `path`."""
        if size == 0:
            return memoryview(b"")
        if offset < 0 or size < 0:
            raise ValueError(f"negative offset or size for {path}")
        with self._lock:
            status = os.stat(path)
            identity = (status.st_dev, status.st_ino)
            entry = self._maps.get(path)
            if entry is None or entry[0] != identity or len(entry[1]) < offset + size:
                if offset + size > status.st_size:
                    raise ValueError(
                        f"region {offset}+{size} lies beyond the end of {path} "
                        f"({status.st_size} bytes)"
                    )
                descriptor = os.open(path, os.O_RDONLY)
                try:
                    mapping = mmap.mmap(descriptor, status.st_size, access=mmap.ACCESS_READ)
                finally:
                    os.close(descriptor)
                # The old mapping stays alive while arrays still view it.
                entry = (identity, mapping)
                self._maps[path] = entry
        return memoryview(entry[1])[offset : offset + size]

    def prune(self):
        """Forget mappings of files that were removed or replaced, so that
        they do not keep the server's deleted files in memory."""
        with self._lock:
            for path, (identity, _mapping) in list(self._maps.items()):
                try:
                    status = os.stat(path)
                except FileNotFoundError:
                    del self._maps[path]
                    continue
                if (status.st_dev, status.st_ino) != identity:
                    del self._maps[path]


class Block:
    """A live region of the arena."""

    __slots__ = ("segment", "offset", "size")

    def __init__(self, segment, offset, size):
        self.segment = segment
        self.offset = offset
        self.size = size

    @property
    def path(self):
        return self.segment.path


class _Segment:
    """One arena file: created 0600, space reserved up front (so a full
    /dev/shm fails here with ENOSPC instead of a SIGBUS on write), mapped."""

    def __init__(self, path, size):
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(descriptor, 0, size)
            self.mapping = mmap.mmap(descriptor, size)
        except BaseException:
            os.close(descriptor)
            os.unlink(path)
            raise
        os.close(descriptor)
        self.path = path
        self.size = size
        self.live = []  # sorted [offset, end) pairs

    def place(self, size):
        """Lowest aligned offset where `size` bytes fit, or None."""
        candidate = 0
        for start, end in self.live:
            if candidate + size <= start:
                break
            candidate = -(-end // _ALIGNMENT) * _ALIGNMENT
        return candidate if candidate + size <= self.size else None

    def destroy(self):
        try:
            self.mapping.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes when it does
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OutputArena:
    """The worker's output files. Thread-safe: the main thread writes
    responses while other threads may write BLS inputs."""

    def __init__(self, directory="/dev/shm"):
        self._directory = directory
        self._numbers = itertools.count()
        self._segments = []  # the last one is current
        # Re-entrant so that close() also works from a signal handler that
        # interrupted this thread inside allocate() or free().
        self._lock = threading.RLock()

    def _new_segment(self, at_least):
        size = _INITIAL_ARENA_BYTES
        if self._segments:
            size = self._segments[-1].size * 2
        while size < at_least:
            size *= 2
        name = f"nereid-py-{os.getpid()}-{next(self._numbers)}"
        segment = _Segment(os.path.join(self._directory, name), size)
        self._segments.append(segment)
        self._retire_unused()
        return segment

    def _retire_unused(self):
        keep = []
        for segment in self._segments[:-1]:
            if segment.live:
                keep.append(segment)
            else:
                segment.destroy()
        self._segments = keep + self._segments[-1:]

    def allocate(self, size):
        """A Block of `size` bytes (size 0 gives an untracked empty block)."""
        with self._lock:
            segment = self._segments[-1] if self._segments else None
            if size == 0:
                return Block(segment or self._new_segment(0), 0, 0)
            offset = segment.place(size) if segment else None
            if offset is None:
                segment = self._new_segment(size)
                offset = 0
            bisect.insort(segment.live, (offset, offset + size))
            return Block(segment, offset, size)

    def free(self, block):
        """Return a Block; its file is unlinked once unused and not current."""
        if block.size == 0:
            return
        with self._lock:
            block.segment.live.remove((block.offset, block.offset + block.size))
            self._retire_unused()

    def write_array(self, block, array):
        """Copy `array` (any strides or byte order) into `block`,
        little-endian, row-major."""
        target = np.ndarray(
            array.shape,
            dtype=array.dtype.newbyteorder("<"),
            buffer=block.segment.mapping,
            offset=block.offset,
        )
        np.copyto(target, array, casting="equiv")
        del target

    def write_bytes(self, block, data):
        """Copy `data` into `block`."""
        block.segment.mapping[block.offset : block.offset + len(data)] = data

    def close(self):
        """Unlink every arena file (at worker exit)."""
        with self._lock:
            for segment in self._segments:
                segment.destroy()
            self._segments = []

"""Shared-memory files: the server's (read) and the worker's arena (written).

Tensor bytes never travel through the channel. The server writes inputs (and
BLS outputs) into files it owns and sends (path, offset, size); the worker
maps those files once per path (InputFiles). The worker writes outputs (and
BLS inputs) into its own arena, files named /dev/shm/nereid-py-<pid>-<n>,
mode 0600, and answers with descriptors into them.

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
import sys
import threading

import numpy as np

_ALIGNMENT = 64
_INITIAL_ARENA_BYTES = 1 << 20
# dtype.byteorder values of arrays whose bytes are already little-endian.
_LITTLE_ENDIAN_ORDERS = "<|=" if sys.byteorder == "little" else "<|"


class _ServerFile:
    """The mappings of one server-owned file, and what they were made from."""

    __slots__ = ("identity", "size", "shared", "private")

    def __init__(self, descriptor, status):
        self.identity = (status.st_dev, status.st_ino)
        self.size = status.st_size
        self.shared = mmap.mmap(descriptor, self.size, access=mmap.ACCESS_READ)
        self.private = mmap.mmap(descriptor, self.size, access=mmap.ACCESS_COPY)


class InputFiles:
    """Mappings of server-owned files, cached by path.

    The server names its files uniquely and never puts a new file at a path
    the worker may still have mapped (it creates a file with a new name when
    it needs more room, and deletes the old one). So a mapping is found by
    path without a system call; only a region beyond its end makes the worker
    look at the file again (it grew: it is mapped anew). Mappings of files
    that were removed are dropped when a new path shows up and at each
    `prune` (the worker calls it every few executes), so that they do not keep
    the server's deleted files in memory.

    Each file is mapped twice. The shared, read-only mapping serves data the
    worker copies out (small inputs, BYTES, BLS outputs). The private one
    (MAP_PRIVATE, copy-on-write) serves zero-copy views of large inputs: a
    model writing to such an input writes to pages of its own, never to the
    server's file. A page written that way no longer follows the file, so
    `private` first drops the pages of the region it hands out
    (MADV_DONTNEED), which makes them read the file again.
    """

    def __init__(self):
        self._files = {}
        self._lock = threading.Lock()

    def shared(self, path, end):
        """The read-only shared mapping of `path`, at least `end` bytes long."""
        entry = self._files.get(path)
        if entry is None or end > entry.size:
            entry = self._map(path, end)
        return entry.shared

    def private(self, path, offset, size):
        """The copy-on-write mapping of `path`, its bytes `offset` to
        `offset + size` fresh from the file."""
        end = offset + size
        entry = self._files.get(path)
        if entry is None or end > entry.size:
            entry = self._map(path, end)
        start = offset - offset % mmap.PAGESIZE
        entry.private.madvise(mmap.MADV_DONTNEED, start, end - start)
        return entry.private

    def _map(self, path, end):
        with self._lock:
            entry = self._files.get(path)
            if entry is not None and end <= entry.size:
                return entry  # another thread mapped it meanwhile
            if entry is None:
                self._prune()
            descriptor = os.open(path, os.O_RDONLY)
            try:
                status = os.fstat(descriptor)
                if end > status.st_size:
                    raise ValueError(
                        f"region ending at byte {end} lies beyond the end of {path} "
                        f"({status.st_size} bytes)"
                    )
                # Arrays still viewing an older mapping keep it alive.
                entry = self._files[path] = _ServerFile(descriptor, status)
            finally:
                os.close(descriptor)
            return entry

    def prune(self):
        """Forget the mappings of files that were removed (or replaced)."""
        with self._lock:
            self._prune()

    def _prune(self):
        for path, entry in list(self._files.items()):
            try:
                status = os.stat(path)
            except FileNotFoundError:
                del self._files[path]
                continue
            if (status.st_dev, status.st_ino) != entry.identity:
                del self._files[path]


class Block:
    """A live region of the arena, holding one or more tensors."""

    __slots__ = ("segment", "path", "offset", "size")

    def __init__(self, segment, offset, size):
        self.segment = segment
        self.path = segment.path
        self.offset = offset
        self.size = size

    def write_array(self, offset, array):
        """Copy `array` (any strides or byte order) to `offset` in the file,
        little-endian, row-major."""
        mapping = self.segment.mapping
        if array.dtype.byteorder in _LITTLE_ENDIAN_ORDERS and array.flags.c_contiguous:
            mapping[offset : offset + array.nbytes] = array
            return
        target = np.ndarray(
            array.shape, dtype=array.dtype.newbyteorder("<"), buffer=mapping, offset=offset
        )
        np.copyto(target, array, casting="equiv")
        del target

    def write_bytes(self, offset, data):
        """Copy `data` to `offset` in the file."""
        self.segment.mapping[offset : offset + len(data)] = data


class _Segment:
    """One arena file: created 0600, space reserved up front (so a full
    /dev/shm fails here with ENOSPC instead of a SIGBUS on write), mapped."""

    def __init__(self, path, size):
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            # The name carries this process's pid: a file already there was
            # left by a dead process that had the same pid (killed before it
            # could remove it, its server gone too). It is nobody's now.
            os.unlink(path)
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

    def allocate(self, sizes):
        """One Block holding a region for each of `sizes` (in bytes), each at
        a 64-byte aligned offset; returns the Block and the regions' offsets
        in its file. A Block of size 0 is not tracked."""
        offsets = []
        end = 0
        for size in sizes:
            start = -(-end // _ALIGNMENT) * _ALIGNMENT
            offsets.append(start)
            end = start + size
        with self._lock:
            segment = self._segments[-1] if self._segments else None
            if end == 0:
                block = Block(segment or self._new_segment(0), 0, 0)
            else:
                offset = segment.place(end) if segment else None
                if offset is None:
                    segment = self._new_segment(end)
                    offset = 0
                bisect.insort(segment.live, (offset, offset + end))
                block = Block(segment, offset, end)
        if block.offset:
            offsets = [block.offset + start for start in offsets]
        return block, offsets

    def free(self, *blocks):
        """Return Blocks; a file is unlinked once unused and not current."""
        with self._lock:
            for block in blocks:
                if block.size:
                    block.segment.live.remove((block.offset, block.offset + block.size))
            if len(self._segments) > 1:
                self._retire_unused()

    def close(self):
        """Unlink every arena file (at worker exit)."""
        with self._lock:
            for segment in self._segments:
                segment.destroy()
            self._segments = []

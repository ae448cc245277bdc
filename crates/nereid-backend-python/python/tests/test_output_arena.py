"""The worker's output arena: files named after its pid, in /dev/shm."""

import os
import sys

from harness import PYTHON_DIR

sys.path.insert(0, str(PYTHON_DIR))
from nereid_pb.shm import OutputArena  # noqa: E402


def test_a_file_left_by_a_dead_process_with_the_same_pid_is_replaced(tmp_path):
    """A process killed before it removed its files leaves them; a later
    one given the same pid must not fail on them (CI saw "[Errno 17] File
    exists: '/dev/shm/nereid-py-23844-0'")."""
    stale = tmp_path / f"nereid-py-{os.getpid()}-0"
    stale.write_bytes(b"left behind")
    arena = OutputArena(directory=str(tmp_path))
    try:
        block, offsets = arena.allocate([16])
        assert offsets == [0]
        assert stale.stat().st_size >= 16 and stale.read_bytes()[:11] != b"left behind"
        arena.free(block)
    finally:
        arena.close()
    assert not stale.exists()

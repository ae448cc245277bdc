"""Fixtures: workers (killed after each test) and a server-owned shm file."""

import pytest

from harness import ShmFile, Worker


@pytest.fixture
def start_worker():
    workers = []

    def start(transport="pipes"):
        worker = Worker(transport)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.close()


@pytest.fixture
def shm():
    handle = ShmFile()
    yield handle
    handle.close()

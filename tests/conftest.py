from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support import WorkerProcess


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """Collects started worker processes and kills any still running at the end."""
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        if os.environ.get("KEEP_WORKER_LOGS"):
            print(f"worker log kept: {process.log_path}")
        else:
            process.log_path.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def result_listener_stopped() -> Iterator[None]:
    """The process's result listener (started by a test that waits for a
    result) holds a connection to the test database: closed after each test."""
    yield
    from orchestration.listen import result_listener

    result_listener.stop()

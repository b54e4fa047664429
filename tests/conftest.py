from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import WorkerProcess, other_connection


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
    from orchestration.listen import RESULT_CHANNEL, result_listener

    if not any(thread.name == "orchestration-results" for thread in threading.enumerate()):
        result_listener.stop()
        return
    # Between two looks at its stop flag the thread waits up to a second for a
    # notification: one that no waiter wants wakes it at once.
    stopping = threading.Thread(target=result_listener.stop)
    stopping.start()
    with contextlib.suppress(psycopg.Error), other_connection() as waker:
        while stopping.is_alive():
            waker.execute("SELECT pg_notify(%s, '')", [RESULT_CHANNEL])
            stopping.join(0.05)
    stopping.join()

"""The runs a worker process holds a lease on: heartbeated while held, given
back when the process stops (``dispatch.Dispatcher`` keeps them)."""

from __future__ import annotations

import threading
import uuid

from ..claim.lease import Lease


class HeldRuns:
    """The runs this process holds a lease on, by lease token: heartbeated while
    held, released on shutdown. Shared by every thread."""

    def __init__(self) -> None:
        self._runs: dict[uuid.UUID, Lease] = {}
        self._lock = threading.Lock()

    def add(self, *runs: Lease) -> None:
        with self._lock:
            self._runs.update((run.lease_token, run) for run in runs)

    def discard(self, *runs: Lease) -> None:
        with self._lock:
            for run in runs:
                self._runs.pop(run.lease_token, None)

    def __contains__(self, run: Lease) -> bool:
        with self._lock:
            return run.lease_token in self._runs

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def snapshot(self) -> list[Lease]:
        with self._lock:
            return list(self._runs.values())

"""How a ``runworkers`` process waits out a database outage.

An outage (``outages.is_outage``: the database lost, unreachable or refusing
writes) is the process's, not a thread's: every thread meets it at once. Each
thread that meets it drops its connection and tries again soon, at most
``RETRY_MAX`` seconds later, so that the process claims again within about a
second of the database's return (a failover's switch takes seconds; a worker
idle long after it has ended is an outage of its own). The process logs the
outage once when it begins, again every ``LOG_EVERY`` seconds while it lasts,
and once when it ends, not once per thread and try. A ``--burst`` process,
which cron jobs and CI run, gives up after ``give_up_after`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..conf import conf
from ..outages import unavailable
from ..retry import wait_to_reconnect
from .services import reset_connection

logger = logging.getLogger(__name__)

#: The longest a thread waits between two tries through an outage (seconds).
RETRY_MAX = 1.0
#: While an outage lasts, it is logged again this often (seconds).
LOG_EVERY = 30.0


class DatabaseOutage:
    """One process's outage: when it began, what it logged, whether it gave up."""

    def __init__(self, worker_id: str, *, give_up_after: float | None, on_give_up: Callable[[], None]) -> None:
        self.worker_id = worker_id
        #: Seconds of outage after which the process stops (None: it never does).
        self.give_up_after = give_up_after
        self._on_give_up = on_give_up
        self._lock = threading.Lock()
        self._since: float | None = None
        self._logged_at = 0.0
        #: The line the process gave up with (None: it has not).
        self.gave_up: str | None = None

    def wait(self, exc: BaseException, failures: int, stopping: threading.Event) -> None:
        """A thread met the outage ``exc`` for the ``failures``-th time in a row:
        log it if due, drop the thread's connection, and wait before its next try
        (less when ``stopping`` is set meanwhile)."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = self._logged_at = now
                logger.warning(
                    "worker %s: %s; retrying every %.0fs at most", self.worker_id, self._describe(exc), RETRY_MAX
                )
            elif now - self._logged_at >= LOG_EVERY:
                self._logged_at = now
                logger.warning(
                    "worker %s: still unavailable after %.0fs: %s",
                    self.worker_id,
                    now - self._since,
                    self._describe(exc),
                )
            lasted = now - self._since
            if self.give_up_after is not None and lasted >= self.give_up_after and self.gave_up is None:
                self.gave_up = f"gave up after {self.give_up_after:g}s: {self._describe(exc)}"  # the bound, as asked
                give_up = True
            else:
                give_up = False
        reset_connection()
        if give_up:
            self._on_give_up()
            return
        wait_to_reconnect(stopping, failures, base=0.1, cap=RETRY_MAX)

    def over(self) -> None:
        """A database call succeeded: an outage in progress has ended (cheap when none is)."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, self._since = time.monotonic() - self._since, None
        logger.info("worker %s: the database is available again after %.1fs", self.worker_id, lasted)

    @staticmethod
    def _describe(exc: BaseException) -> str:
        return unavailable(conf.DATABASE, exc)

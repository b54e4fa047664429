"""A ``runworkers`` process's background threads: the heartbeat, the stuck
sweep, the scheduler and the NOTIFY listener. Each has its own connection.
Any error (any ``DatabaseError``: a standby promoted or demoted in a failover
raises ``InternalError``, not ``OperationalError``; a bug) makes it log,
reconnect and carry on. A thread that dies anyway (a ``BaseException``) is
reported to ``on_death``: the process then stops and exits non-zero, so that
its supervisor restarts it, instead of running on with no heartbeat or sweep."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from django.db import DatabaseError, connections

from .. import recovery, worker_rows
from ..conf import conf
from ..ctx import timeouts
from ..listen import LISTEN, NOTIFY_CHANNEL, notifications_arrive, notify_new_work
from ..retry import wait_to_reconnect
from ..schedules import Scheduler, scheduled_workflows
from .dispatch import Dispatcher
from .systemd import notify, watchdog_seconds

logger = logging.getLogger(__name__)


def reset_connection() -> None:
    """Drop this thread's connection so the next query reconnects."""
    with contextlib.suppress(DatabaseError):
        connections[conf.DATABASE].close()


class Services:
    """The background threads of one process, started and stopped together."""

    def __init__(
        self, dispatcher: Dispatcher, *, listen: bool, schedule: bool, on_death: Callable[[str], None]
    ) -> None:
        self.dispatcher = dispatcher
        self.worker_id = dispatcher.worker_id
        self._stop = threading.Event()
        self._on_death = on_death
        #: What the listener's probe sends: the listener's own NOTIFY, which also ends its wait at ``stop``.
        self._probe = f"probe:{self.worker_id}"
        loops: list[tuple[str, Callable[[], None]]] = [("heartbeat", self._heartbeat), ("reclaim", self._reclaim)]
        self._listens = listen
        if listen:
            loops.append(("listen", self._listen))
        if schedule and conf.SCHEDULER and scheduled_workflows():
            loops.append(("schedule", self._schedule))
        self.threads = [
            threading.Thread(target=self._watched, args=(name, loop), name=f"orchestration-{name}", daemon=True)
            for name, loop in loops
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._listens:
            self._end_listen_wait()
        for thread in self.threads:
            thread.join(timeout=5)

    def _end_listen_wait(self) -> None:
        """NOTIFY the listener's probe, so that its wait for notifications ends
        now, not at its timeout: every ``runworkers`` would otherwise take up to
        a second longer to exit. (Other processes' listeners wake a thread for
        it, as for any probe.) A database that is down has nothing to wait on."""
        with contextlib.suppress(DatabaseError):
            notify_new_work(conf.DATABASE, self._probe)

    def _watched(self, name: str, loop: Callable[[], None]) -> None:
        """Run ``loop`` on this thread's own connection; report it (from its
        ``except``) if it dies."""
        try:
            loop()
        except BaseException:
            self._on_death(name)
        finally:
            connections.close_all()

    def _failed(self, what: str, exc: Exception) -> None:
        """Log a loop's failed pass and drop its connection: the next pass reconnects."""
        if isinstance(exc, DatabaseError):
            logger.warning("worker %s: %s failed (%s: %s)", self.worker_id, what, type(exc).__name__, exc)
        else:
            logger.exception("worker %s: %s failed", self.worker_id, what)
        reset_connection()

    def _heartbeat(self) -> None:
        held = self.dispatcher.held
        watched = watchdog_seconds() is not None
        while not self._stop.wait(conf.HEARTBEAT_INTERVAL):
            try:
                for run in recovery.heartbeat(held.snapshot()):
                    if run in held:  # not merely finished since the snapshot
                        logger.warning("workflow %s: lease lost (reclaimed or cancelled); stopping it", run.id)
                        run.lost.set()
                written = worker_rows.beat(self.worker_id, abandoned_bodies=len(timeouts.abandoned_bodies()))
            except Exception as exc:
                self._failed("heartbeat", exc)
            else:
                if written and watched:  # systemd restarts a process whose heartbeat stopped working
                    notify("WATCHDOG=1")

    def _reclaim(self) -> None:
        interval = max(0.5, min(conf.STUCK_AFTER / 4, 60.0))
        while True:
            try:
                recovery.reclaim_stuck()
            except Exception as exc:
                self._failed("stuck sweep", exc)
            if self._stop.wait(interval):
                return

    def _schedule(self) -> None:
        """Start the run of each schedule's tick, one run a tick (see ``schedules``)."""
        scheduler = Scheduler()
        while True:
            try:
                scheduler.start_due_runs()
            except Exception as exc:
                self._failed("schedule check", exc)
            if self._stop.wait(min(1.0, self.dispatcher.poll_interval)):
                return

    def _listen(self) -> None:
        """Wake idle threads on NOTIFY; polling covers anything missed meanwhile."""
        failures = 0
        queues = self.dispatcher.queues
        while not self._stop.is_set():
            try:
                connection = connections[conf.DATABASE]
                connection.ensure_connection()
                pg = connection.connection
                pg.execute(LISTEN)
                # Real work announced during the probe wakes every thread.
                if not notifications_arrive(pg, NOTIFY_CHANNEL, self._probe, lambda _: self.dispatcher.wake_all()):
                    logger.warning(
                        "worker %s: LISTEN receives nothing on this connection (a pooler in transaction mode, "
                        "such as PgBouncer?); polling every %ss instead",
                        self.worker_id,
                        self.dispatcher.poll_interval,
                    )
                    return
                failures = 0
                self.dispatcher.wake_all()  # anything sent while we were not listening
                while not self._stop.is_set():
                    # Out of the generator before claiming on this connection: it holds the connection while it waits.
                    notices = list(pg.notifies(timeout=1.0, stop_after=1))
                    announced = sum(queues is None or notice.payload in queues for notice in notices)
                    if announced and not self._stop.is_set():
                        self.dispatcher.claim_announced(announced)
            except Exception as exc:  # raw psycopg errors too: this connection is not Django-wrapped
                failures += 1
                logger.warning("worker %s: LISTEN failed (%s); polling meanwhile", self.worker_id, exc)
                reset_connection()
                wait_to_reconnect(self._stop, failures)

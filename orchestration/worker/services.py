"""The background work of one ``runworkers`` process, on one thread and one
database connection: the listener for new work and the heartbeat, and, in
one process of all at a time (the watcher), the stuck sweep, the watch for
timers coming due and the schedules.

Idle processes must cost the server next to nothing, however many there are:
each holds its threads' connections and this one, its idle threads wait for
a NOTIFY instead of polling (``Dispatcher.idle``), and what would otherwise
be done by every process once a poll interval is done by the watcher only.
The watcher is whichever process holds ``WATCHER_LOCK_KEY``, a session-level
advisory lock on this connection: it passes on when the process stops (its
``RESIGNED`` notification sends the others to take it at once) or dies (its
connection closes; the others try again with each heartbeat once it is
silent). A watcher that is paused or hung keeps the lock, so it says it is
alive (``ALIVE``) every ``alive_every()`` seconds, and a process that has not
heard it for three of them (``watcher_silent``) watches too, until it hears it again.

A run that becomes due without a NOTIFY is one whose timer ends (a delayed
start, a backoff, a sleep: ``run_after``); the watcher announces each queue
with such runs once a poll interval (``TIMERS_DUE``), and the listeners claim
them as any announced work.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import DatabaseError, connections

from .. import recovery, worker_rows
from ..conf import conf
from ..ctx import timeouts
from ..listen import LISTEN, NOTIFY, NOTIFY_CHANNEL, notifications_arrive, notify_new_work
from ..retry import wait_to_reconnect
from ..schedules import Scheduler
from .dispatch import Dispatcher
from .systemd import notify, watchdog_seconds

logger = logging.getLogger(__name__)

#: Key of the session-level advisory lock whose holder is the watcher (``"watch"``).
WATCHER_LOCK_KEY = 0x7761746368
#: What a watcher that stops notifies, and what it notifies while it watches: a queue name never has a comma.
RESIGNED = ",watcher resigned"
ALIVE = ",watcher alive"
#: Each NOTIFY costs every listening process a transaction (PostgreSQL reads it
#: in one): rare enough to stay small in N, and no rarer than a stuck sweep, so
#: that a paused watcher delays the recovery of stuck runs by little more than
#: ``STUCK_AFTER`` (see ``alive_every``).
ALIVE_EVERY = 10.0


def alive_every() -> float:
    """Seconds between the watcher's alive notices: ``ALIVE_EVERY``, or a stuck sweep's interval if shorter."""
    return min(ALIVE_EVERY, sweep_interval())


def sweep_interval() -> float:
    """Seconds between the watcher's stuck sweeps: a quarter of ``STUCK_AFTER``, from half a second to a minute."""
    return max(0.5, min(conf.STUCK_AFTER / 4, 60.0))


def watcher_silent(poll_interval: float) -> float:
    """Seconds without an alive notice after which the others watch too: three
    notices missed (the watcher says it once a poll interval at most)."""
    return 3 * max(alive_every(), poll_interval)


#: The timers that ended since the last look (less ``TIMERS_OVERLAP``, for the
#: transactions that set one and committed after it), a notification a queue;
#: then the moment it looked, from the server's clock. Runs claimed since, or
#: made due (``run_after`` NULL), are not announced again.
TIMERS_DUE = """
SELECT statement_timestamp(), (SELECT count(pg_notify(%(channel)s, due.queue)) FROM (
    SELECT DISTINCT queue FROM workflows
    WHERE status = 'pending' AND run_after > %(since)s::timestamptz - make_interval(secs => %(overlap)s)
      AND run_after <= statement_timestamp()
) AS due), CASE WHEN %(alive)s THEN pg_notify(%(channel)s, %(alive_payload)s) END
"""
#: Seconds of overlap between the watcher's looks at the timers (see ``TIMERS_DUE``).
TIMERS_OVERLAP = 5.0


def reset_connection() -> None:
    """Drop this thread's connection so the next query reconnects."""
    with contextlib.suppress(DatabaseError):
        connections[conf.DATABASE].close()


class Periodic:
    """A task due every ``interval`` seconds, the first time after ``first`` seconds."""

    def __init__(self, interval: float, task: Callable[[], None], first: float = 0.0) -> None:
        self.interval = interval
        self.task = task
        self.due_at = time.monotonic() + first

    def run_if_due(self, now: float) -> None:
        if now >= self.due_at:
            self.due_at = now + self.interval
            self.task()


class Services:
    """The process's background thread (see the module's docstring), started and stopped with it."""

    def __init__(
        self, dispatcher: Dispatcher, *, listen: bool, schedule: bool, on_death: Callable[[str], None]
    ) -> None:
        self.dispatcher = dispatcher
        self.worker_id = dispatcher.worker_id
        self._stop = threading.Event()
        self._on_death = on_death
        #: What the listener's probe sends: the listener's own NOTIFY, which also ends its wait at ``stop``.
        self._probe = f"probe:{self.worker_id}"
        self._listens = listen
        #: Whether this process is the watcher now (it holds ``WATCHER_LOCK_KEY`` on this thread's connection).
        self.watching = False
        self._timers_since: Any = None
        #: When the watcher was last heard (or this process watched), and when this one last said it is alive.
        self._watcher_heard_at = time.monotonic()
        self._alive_said_at = 0.0
        # Schedules are rows, made at any time: the watcher always looks for them.
        self._scheduler = Scheduler() if schedule and conf.SCHEDULER else None
        self._watched = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="orchestration-services", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._listens:
            self._end_listen_wait()
        self.thread.join(timeout=5)

    def _end_listen_wait(self) -> None:
        """NOTIFY the listener's probe, so that its wait for notifications ends
        now, not at its timeout: every ``runworkers`` would otherwise take up to
        a second longer to exit. A database that is down has nothing to wait on."""
        with contextlib.suppress(DatabaseError):
            notify_new_work(conf.DATABASE, self._probe)

    def _serve(self) -> None:
        """Run until stopped, reconnecting after a failure; report (from its
        ``except``) an error that kills the thread."""
        try:
            self._until_stopped()
        except BaseException:
            self._on_death("services")
        finally:
            self._resign()
            connections.close_all()

    def _until_stopped(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                connection = connections[conf.DATABASE]
                connection.ensure_connection()
                listening = self._start_listening(connection.connection) if self._listens else False
                failures = 0
                self._loop(connection.connection if listening else None)
            except Exception as exc:  # raw psycopg errors too: the LISTEN connection is not Django-wrapped
                failures += 1
                self._lost(exc)
                wait_to_reconnect(self._stop, failures)

    def _start_listening(self, pg: Any) -> bool:
        """LISTEN, and check that notifications arrive; True when they do (the
        threads then wait for them instead of polling)."""
        pg.execute(LISTEN)
        # Real work announced during the probe wakes every thread.
        if not notifications_arrive(pg, NOTIFY_CHANNEL, self._probe, lambda _: self.dispatcher.wake_all()):
            logger.warning(
                "worker %s: LISTEN receives nothing on this connection (a pooler in transaction mode, "
                "such as PgBouncer?); polling every %ss instead",
                self.worker_id,
                self.dispatcher.poll_interval,
            )
            self._listens = False
            pg.execute(f"UNLISTEN {NOTIFY_CHANNEL}")
            return False
        self.dispatcher.set_listening(True)  # and wakes the threads, for anything sent while none listened
        return True

    def _loop(self, pg: Any) -> None:
        """The tasks, each when due, and between them the notifications (``pg``:
        None when not listening). A database error leaves to reconnect."""
        tasks = [
            Periodic(conf.HEARTBEAT_INTERVAL, self._heartbeat, first=conf.HEARTBEAT_INTERVAL),
            Periodic(sweep_interval(), self._sweep),
            Periodic(self.dispatcher.poll_interval, self._announce_timers),
        ]
        if self._scheduler is not None:
            tasks.append(Periodic(min(1.0, self.dispatcher.poll_interval), self._schedule))
        self._take_watch()
        while not self._stop.is_set():
            now = time.monotonic()
            for task in tasks:
                task.run_if_due(now)
            wait = max(0.0, min(1.0, min(task.due_at for task in tasks) - time.monotonic()))
            if pg is None:
                self._stop.wait(wait)
                continue
            # Out of the generator before claiming on this connection: it holds the connection while it waits.
            notices = list(pg.notifies(timeout=wait, stop_after=1))
            self._heard(notices)

    def _heard(self, notices: list[Any]) -> None:
        queues = self.dispatcher.queues
        payloads = [notice.payload for notice in notices]
        if ALIVE in payloads:
            self._watcher_heard_at = time.monotonic()
        if RESIGNED in payloads and not self.watching:
            self._take_watch()
        announced = sum(
            payload not in (RESIGNED, ALIVE) and (queues is None or payload in queues) for payload in payloads
        )
        if announced and not self._stop.is_set():
            self.dispatcher.claim_announced(announced)

    def _lost(self, exc: Exception) -> None:
        """The connection failed: log it, drop it (with it the LISTEN and the
        watcher's lock), and let the threads poll until it is back."""
        if isinstance(exc, DatabaseError | psycopg.Error):
            logger.warning("worker %s: background work failed (%s: %s)", self.worker_id, type(exc).__name__, exc)
        else:
            logger.exception("worker %s: background work failed", self.worker_id)
        if self.dispatcher.set_listening(False):
            logger.warning("worker %s: not listening; polling meanwhile", self.worker_id)
        self.watching = False
        reset_connection()

    # -- the tasks -----------------------------------------------------------------

    def _heartbeat(self) -> None:
        held = self.dispatcher.held
        for run in recovery.heartbeat(held.snapshot()):
            if run in held:  # not merely finished since the snapshot
                logger.warning("workflow %s: lease lost (reclaimed or cancelled); stopping it", run.id)
                run.lost.set()
        written = worker_rows.beat(self.worker_id, abandoned_bodies=len(timeouts.abandoned_bodies()))
        if written and watchdog_seconds() is not None:  # systemd restarts a process whose heartbeat stopped working
            notify("WATCHDOG=1")
        if not self.watching and self._watcher_silent():  # a watcher heard lately holds the lock
            self._take_watch()
        elif self.watching and self.dispatcher.listening:
            # What no NOTIFY announced and no timer holds (a release's notification
            # lost with a connection) is claimed within a heartbeat.
            self.dispatcher.wake()

    def _take_watch(self) -> None:
        with connections[conf.DATABASE].cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [WATCHER_LOCK_KEY])
            self.watching = bool(cursor.fetchone()[0])
        if self.watching:
            logger.info("worker %s: watching timers and the schedules", self.worker_id)

    def _resign(self) -> None:
        """Let another process watch at once: unlock, and say so (from the thread's own connection)."""
        if not self.watching:
            return
        self.watching = False
        with contextlib.suppress(Exception), connections[conf.DATABASE].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [WATCHER_LOCK_KEY])
            cursor.execute(NOTIFY, [NOTIFY_CHANNEL, RESIGNED])

    def _acting_as_watcher(self) -> bool:
        """Whether this process watches now: it is the watcher, or hears none
        (not listening, or the watcher silent for ``watcher_silent`` seconds:
        paused or hung, with the lock)."""
        if self.watching:
            self._watcher_heard_at = time.monotonic()
            return True
        return self._watcher_silent()

    def _watcher_silent(self) -> bool:
        """Whether no watcher is heard: not listening, or none said it is alive lately (``watcher_silent``)."""
        silent_for = time.monotonic() - self._watcher_heard_at
        return not self.dispatcher.listening or silent_for > watcher_silent(self.dispatcher.poll_interval)

    def _sweep(self) -> None:
        if self._acting_as_watcher():  # and under recovery's lock, for the moments two act so
            recovery.reclaim_stuck()

    def _announce_timers(self) -> None:
        if not self._acting_as_watcher():
            self._timers_since = None
            return
        now = time.monotonic()
        alive = self.watching and now - self._alive_said_at >= alive_every()
        with connections[conf.DATABASE].cursor() as cursor:
            if self._timers_since is None:
                cursor.execute("SELECT statement_timestamp()")
            else:
                params = {
                    "channel": NOTIFY_CHANNEL,
                    "since": self._timers_since,
                    "overlap": TIMERS_OVERLAP,
                    "alive": alive,
                    "alive_payload": ALIVE,
                }
                cursor.execute(TIMERS_DUE, params)
                if alive:
                    self._alive_said_at = now
            self._timers_since = cursor.fetchone()[0]

    def _schedule(self) -> None:
        """Start the run of each schedule's tick, one run a tick (see ``schedules``)."""
        if self._scheduler is not None and self._acting_as_watcher():
            self._scheduler.start_due_runs()

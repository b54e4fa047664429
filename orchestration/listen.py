"""LISTEN and NOTIFY: the channel that announces new work (``notify_new_work``,
heard by the workers' listener), whether notifications arrive on a LISTEN
connection, and the process's listener for the ends of awaited runs.

``wait_for_result`` marks the run it waits for ``awaited``; the triggers of
migrations 0010 and 0015 then NOTIFY ``RESULT_CHANNEL`` with the run's id when
it finishes or is deleted. One thread a process (``ResultListener``) holds the LISTEN
connection for every waiter in the process, sync or async, so a thousand
waiters cost one connection, not a thousand.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections

from .conf import conf
from .retry import wait_to_reconnect

logger = logging.getLogger(__name__)

#: Channel on which ``start_workflow`` announces new work; the payload is the queue.
NOTIFY_CHANNEL = "orchestration_new_work"
LISTEN = f"LISTEN {NOTIFY_CHANNEL}"
NOTIFY = "SELECT pg_notify(%s, %s)"

#: Channel of an awaited run's end or delete, or new progress (the triggers of migrations 0010, 0015,
#: 0027); the payload is the run's id.
RESULT_CHANNEL = "orchestration_result"
#: What a waiter reads of the run it waits for (the listener reads it for them).
ROW_COLUMNS = ("id", "status", "workflow_type", "output_data", "error_message", "progress")

Wake = Callable[[dict[str, Any] | None], object]


def notify_new_work(alias: str, queue: str) -> None:
    """Wake idle workers. Inside a transaction Postgres delivers it at commit,
    so a rolled-back start never wakes anyone."""
    with connections[alias].cursor() as cursor:
        cursor.execute(NOTIFY, [NOTIFY_CHANNEL, queue])


def notifications_arrive(pg: Any, channel: str, probe: str, on_other: Callable[[str], None]) -> bool:
    """Whether the LISTEN on ``pg`` (to ``channel``) receives anything: notify
    ``probe`` from another connection and wait for it here. Behind a pooler in
    transaction mode LISTEN succeeds, but on a server connection that goes
    back to the pool at once, and nothing ever arrives. (Notifying from this
    connection could borrow that very server connection, and deliver the
    notification to us once, by chance.) Other payloads received meanwhile
    go to ``on_other``."""
    sender = connections.create_connection(conf.DATABASE)
    try:
        with sender.cursor() as cursor:
            cursor.execute(NOTIFY, [channel, probe])
    finally:
        sender.close()
    for notice in pg.notifies(timeout=5.0):
        if notice.payload == probe:
            return True
        on_other(notice.payload)
    return False


class Mode(enum.Enum):
    STARTING = "starting"  # not listening yet (or reconnecting): waiters poll meanwhile
    LISTENING = "listening"  # an awaited run's end is announced
    POLLING = "polling"  # LISTEN delivers nothing here (PgBouncer in transaction mode): waiters poll


class ResultListener:
    """The process's LISTEN on ``RESULT_CHANNEL``: when ids arrive, reads the
    runs someone here waits for, all in one query, and calls each waiter's
    wake-up with its run's row (``ROW_COLUMNS``); calls every waiter's with
    None when the mode changes (the connection dropped, or came back: they
    read what they wait for themselves). A burst of completions costs one
    read, not one a waiter, and an async waiter needs no thread to read."""

    #: The thread stops (and closes its connection) once no one has waited for this many seconds.
    idle_exit = 60.0

    def __init__(self) -> None:
        self.mode = Mode.STARTING
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Wake]] = {}
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def subscribed(self, workflow_id: uuid.UUID, wake: Wake) -> Any:
        """Call ``wake`` (from the listener's thread) with the row of run
        ``workflow_id`` when it finished, or with None when it may have."""
        key = str(workflow_id)
        with self._lock:
            self._waiters.setdefault(key, []).append(wake)
            if self._thread is None:
                self.mode = Mode.STARTING
                self._stop = threading.Event()  # each thread its own: a stopping one never sees it cleared
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="orchestration-results", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                wakes = self._waiters.get(key, [])
                with contextlib.suppress(ValueError):
                    wakes.remove(wake)
                if not wakes:
                    self._waiters.pop(key, None)

    def stop(self) -> None:
        """Stop the thread and close its connection (the next waiter starts it again)."""
        with self._lock:
            thread, stop = self._thread, self._stop
        stop.set()
        if thread is not None:
            thread.join()

    def _idle(self, stop: threading.Event, since: float) -> bool:
        """Whether to stop: asked to, or no one has waited since ``since``. A
        thread that stops says so under the lock, so a waiter arriving now starts another."""
        with self._lock:
            if self._waiters and not stop.is_set():
                return False
            if not stop.is_set() and time.monotonic() - since < self.idle_exit:
                return False
            if self._thread is threading.current_thread():
                self._thread = None
            return True

    def _wake(self, key: str | None = None, row: dict[str, Any] | None = None) -> None:
        with self._lock:
            if key is None:
                wakes = [wake for wakes in self._waiters.values() for wake in wakes]
            else:
                wakes = list(self._waiters.get(key, ()))
        for wake in wakes:
            with contextlib.suppress(Exception):  # a waiter's loop closed meanwhile: not the listener's failure
                wake(row)

    def _deliver(self, ids: list[str]) -> None:
        """Read the runs of ``ids`` that someone waits for and wake their waiters
        with their rows; those of a run no longer there (deleted) read it
        themselves, and find it gone."""
        with self._lock:
            wanted = [key for key in dict.fromkeys(ids) if key in self._waiters]
        if not wanted:
            return
        model = apps.get_model("orchestration", "Workflow")
        missing = set(wanted)
        for row in model._default_manager.using(conf.DATABASE).filter(pk__in=wanted).values(*ROW_COLUMNS):
            key = str(row["id"])
            missing.discard(key)
            self._wake(key, row)
        for key in missing:
            self._wake(key)

    def _deliver_one(self, key: str) -> None:
        self._wake(key)  # during the probe: the waiter reads its run itself

    def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        self._wake()

    def _run(self, stop: threading.Event) -> None:
        failures = 0
        idle_since = time.monotonic()
        try:
            while not self._idle(stop, idle_since):
                try:
                    connection = connections[conf.DATABASE]
                    connection.ensure_connection()
                    pg = connection.connection
                    pg.execute(f"LISTEN {RESULT_CHANNEL}")
                    if not notifications_arrive(pg, RESULT_CHANNEL, f"probe:{uuid.uuid4()}", self._deliver_one):
                        logger.warning(
                            "LISTEN receives nothing on this connection (a pooler in transaction mode, such as "
                            "PgBouncer?); waiting for results by polling every %ss instead",
                            conf.POLL_INTERVAL,
                        )
                        self._set_mode(Mode.POLLING)
                        while not self._idle(stop, idle_since):  # kept, so the probe is not repeated by every waiter
                            if self._waiters:
                                idle_since = time.monotonic()
                            stop.wait(1.0)
                        return
                    self._set_mode(Mode.LISTENING)
                    failures = 0
                    while not self._idle(stop, idle_since):
                        # Every notification already received, at once (the query must wait for the generator's end).
                        self._deliver([notice.payload for notice in pg.notifies(timeout=1.0, stop_after=1)])
                        if self._waiters:
                            idle_since = time.monotonic()
                    return
                except Exception as exc:  # raw psycopg errors too: this connection is not Django-wrapped
                    failures += 1
                    logger.warning("LISTEN for results failed (%s); waiters poll meanwhile", exc)
                    self._set_mode(Mode.STARTING)
                    with contextlib.suppress(DatabaseError):
                        connections[conf.DATABASE].close()
                    wait_to_reconnect(stop, failures)
        finally:
            connections.close_all()


#: The process's one listener, started by the first waiter.
result_listener = ResultListener()

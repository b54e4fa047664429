"""The ``runworkers`` process: its worker threads, its signals and its shutdown.

Each worker thread has its own database connection (Django's connections are
per thread). Runs are claimed in short transactions (``dispatch``), user code
runs outside any transaction (``execution``), and every write is a fenced
write of the run's lease. Recovery never executes anything: stuck workflows go
back to pending and are claimed like any other (``services``).
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import signal
import socket
import threading
import time
from typing import Any

from django.db import DatabaseError, connections

from .. import flow, worker_rows
from ..claim.lease import Lease, OutagePolicy
from ..conf import conf
from ..ctx import timeouts
from ..outages import is_outage
from ..registry import async_workflow_types
from ..retry import wait_to_reconnect
from .dispatch import CLAIM_AHEAD_TIMEOUT, Dispatcher
from .execution import Outcome, execute
from .links import dead_link_seconds, dead_links_given_up
from .loop import DATABASE_THREADS, SharedLoop
from .outage import DatabaseOutage
from .restart import count_restarts_so_far, restarts_so_far
from .services import Services, reset_connection
from .systemd import notify, watchdog_seconds

logger = logging.getLogger(__name__)

#: ``Worker.run``'s exit status when it gave up on an unavailable database.
GAVE_UP = 3


def worker_identity() -> str:
    """Host, pid and a random nonce: unique even when a restarted container
    reuses a host name and pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Worker:
    """One ``runworkers`` process: ``concurrency`` threads claiming from ``queues``."""

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        queues: list[str] | None = None,
        burst: bool = False,
        poll_interval: float | None = None,
        shutdown_grace: float | None = None,
        listen: bool = True,
        claim_ahead: int | None = None,
        async_concurrency: int | None = None,
        give_up_after: float | None = None,
    ) -> None:
        self.concurrency = concurrency or conf.CONCURRENCY
        #: Async runs held in the process's shared event loop (0: each runs on a thread, as a sync run).
        self.async_concurrency = conf.ASYNC_CONCURRENCY if async_concurrency is None else async_concurrency
        self.shared_loop: SharedLoop | None = None
        claim_ahead = conf.CLAIM_AHEAD if claim_ahead is None else claim_ahead
        self.queues = queues or None
        self.burst = burst
        self.shutdown_grace = conf.SHUTDOWN_GRACE if shutdown_grace is None else shutdown_grace
        self.listen = listen
        self.worker_id = worker_identity()
        #: First signal: claim nothing more, release held workflows at their next step boundary.
        self.stopping = threading.Event()
        #: Second signal or grace expired: release everything now.
        self.stop_now = threading.Event()
        self.dispatcher = Dispatcher(
            self.worker_id,
            self.queues,
            claim_ahead=claim_ahead,
            poll_interval=conf.POLL_INTERVAL if poll_interval is None else poll_interval,
            stopping=self.stopping,
            threads=self.concurrency,
        )
        #: The database outage the process is waiting out, if any; ``give_up_after`` seconds of it stop the process.
        self.outage = DatabaseOutage(self.worker_id, give_up_after=give_up_after, on_give_up=self._give_up)
        self._outage = OutagePolicy(give_up=self.stop_now, pause=self._write_unavailable, resumed=self.outage.over)
        #: Abandoned step bodies still running that make the process restart (``MAX_ABANDONED_BODIES``).
        self.most_abandoned: int = conf.MAX_ABANDONED_BODIES or self.concurrency
        #: Why the process stopped to restart itself (``worker.restart``); None: it stops for good.
        self.restart_because: str | None = None
        #: The threads of this process that died (see ``_thread_died``).
        self.dead_threads: list[str] = []

    @property
    def completed(self) -> int:
        return self.dispatcher.completed

    @property
    def failed(self) -> int:
        return self.dispatcher.failed

    # -- lifecycle -------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, with ``burst``, until nothing is due); return
        the exit status: 0, 1 when one of its threads died (see ``_thread_died``),
        or ``GAVE_UP`` when the database was unavailable for ``give_up_after``
        seconds (``outage.gave_up`` says why)."""
        # Every connection opened gives up a silent link.
        with dead_links_given_up(conf.DATABASE, conf.STUCK_AFTER) as added:
            if added:
                logger.info(
                    "worker %s: a silent link to the database is given up after %gs (%s)",
                    self.worker_id,
                    dead_link_seconds(conf.STUCK_AFTER),
                    ", ".join(f"{key}={value}" for key, value in added.items()),
                )
            return self._run()

    def _run(self) -> int:
        in_main_thread = threading.current_thread() is threading.main_thread()
        # Django, the apps and their modules are loaded: the cyclic garbage
        # collector need not walk them again on every pass.
        gc.freeze()
        self._check_pool()
        self._sync_queue_settings()
        previous_handlers = self._install_signal_handlers() if in_main_thread else {}
        logger.info(
            "worker %s starting: %d threads, %d async runs, queues %s%s%s",
            self.worker_id,
            self.concurrency,
            self.async_concurrency,
            ",".join(self.queues) if self.queues else "all",
            ", burst" if self.burst else "",
            f", restart {restarts_so_far()}" if restarts_so_far() else "",
        )
        count_restarts_so_far()
        # Ready before the process's row says it runs (its claims follow the row at once).
        if self.async_concurrency and async_workflow_types():
            self.shared_loop = SharedLoop(
                self.async_concurrency,
                self.dispatcher,
                should_release=self.stopping.is_set,
                outage=self._outage,
                on_death=self._thread_died,
            )
            self.shared_loop.start()
        services = Services(self.dispatcher, listen=self.listen, schedule=not self.burst, on_death=self._thread_died)
        worker_rows.register(
            self.worker_id, queues=self.queues, concurrency=self.concurrency, restarts=restarts_so_far()
        )
        services.start()
        connections[conf.DATABASE].close()  # the main thread's, opened to register: it idles from here on
        threads = [
            threading.Thread(target=self._worker_thread, name=f"orchestration-worker-{n}", daemon=True)
            for n in range(1, self.concurrency + 1)
        ]
        for thread in threads:
            thread.start()
        self._tell_systemd_ready()
        try:
            self._wait_for(threads)
        finally:
            self.dispatcher.wake_all()
            if self.shared_loop is not None:
                self.shared_loop.close()
            services.stop()
            worker_rows.remove(self.worker_id)
            # Kept until the exec when restarting: a signal meanwhile turns the restart into an exit.
            for signum, handler in previous_handlers.items() if self.restart_because is None else ():
                signal.signal(signum, handler)
            connections.close_all()
        logger.info("worker %s stopped: %d completed, %d failed attempts", self.worker_id, self.completed, self.failed)
        if self.outage.gave_up is not None:
            return GAVE_UP
        if self.dead_threads:
            logger.error(
                "worker %s: exiting with status 1: thread(s) %s died", self.worker_id, ", ".join(self.dead_threads)
            )
            return 1
        return 0

    def _check_pool(self) -> None:
        """Each thread keeps its connection: a smaller Django pool starves threads."""
        pool = getattr(connections[conf.DATABASE], "pool", None)
        # the background thread (listener, heartbeat, sweep, schedules), the main thread; the loop's database threads
        needed = self.concurrency + 2 + (DATABASE_THREADS if self.async_concurrency and async_workflow_types() else 0)
        if pool is not None and pool.max_size < needed:
            logger.warning(
                "worker %s: the connection pool of database %r holds %d connections, but %d threads and the "
                "services need %d; threads will wait for one. Raise OPTIONS['pool']['max_size'] or lower "
                "--concurrency.",
                self.worker_id,
                conf.DATABASE,
                pool.max_size,
                self.concurrency,
                needed,
            )

    def _sync_queue_settings(self) -> None:
        """Write ``ORCHESTRATION["QUEUES"]``'s limits into the queues' rows (``flow.sync_settings``)."""
        try:
            flow.sync_settings()
        except DatabaseError as exc:
            logger.warning("worker %s: could not write the queues' limits from the settings (%s)", self.worker_id, exc)

    def stop(self) -> None:
        """Ask the process to stop as a first SIGTERM would."""
        self.stopping.set()
        self.dispatcher.wake_all()

    def _thread_died(self, name: str) -> None:
        """Called in the ``except`` of a thread of this process that dies of an
        error nothing caught: stop as on a first signal (held runs are
        released), to exit non-zero. A process with no heartbeat would have its
        runs reclaimed from under it, one with no sweep reclaims nothing: a
        supervisor restarts it whole instead."""
        self.dead_threads.append(name)
        logger.critical(
            "worker %s: the %s thread died; stopping, to exit with status 1", self.worker_id, name, exc_info=True
        )
        self.stop()

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.restart_because is not None and not self.stop_now.is_set():
            # Stopping to restart already: the signal turns it into a stop for good.
            logger.warning(
                "worker %s: %s received while stopping to restart; it will exit instead",
                self.worker_id,
                signal.Signals(signum).name,
            )
            self.restart_because = None
        elif not self.stopping.is_set():
            logger.warning(
                "worker %s: %s received; finishing running steps (up to %ss), then releasing. "
                "Send it again to release at once.",
                self.worker_id,
                signal.Signals(signum).name,
                self.shutdown_grace,
            )
            self.stop()
        else:
            logger.warning("worker %s: second signal; releasing held workflows now", self.worker_id)
            self.stop_now.set()

    def _wait_for(self, threads: list[threading.Thread]) -> None:
        """Wait for the worker threads, then for the shared loop's runs; release
        what is held when the grace period after a signal ends."""
        deadline: float | None = None
        loop = self.shared_loop
        while any(thread.is_alive() for thread in threads) or (loop is not None and loop.thread.is_alive()):
            if loop is not None and not any(thread.is_alive() for thread in threads):
                loop.close_when_idle()  # no thread hands it more runs
            if not self.stopping.is_set():
                self._restart_at_the_cap()
            if self.stopping.is_set() and deadline is None:
                deadline = time.monotonic() + self.shutdown_grace
                self._say_stopping()
            if deadline is not None and time.monotonic() >= deadline:
                self.stop_now.set()
            if self.stop_now.is_set():
                self._release_all_held()
                return
            self.dispatcher.release_waiting(older_than=CLAIM_AHEAD_TIMEOUT)
            for thread in threads:
                thread.join(timeout=0.05)
            if loop is not None and not any(thread.is_alive() for thread in threads):
                loop.thread.join(timeout=0.05)

    def _tell_systemd_ready(self) -> None:
        """``READY=1`` for a ``Type=notify`` unit (nothing without ``NOTIFY_SOCKET``)."""
        watchdog = watchdog_seconds()
        if watchdog is not None and watchdog < 2 * conf.HEARTBEAT_INTERVAL:
            logger.warning(
                "worker %s: systemd's watchdog (WatchdogSec=%gs) is fed at each heartbeat, every %gs "
                "(HEARTBEAT_INTERVAL); it will kill the process. Set WatchdogSec to 3 heartbeats or more.",
                self.worker_id,
                watchdog,
                conf.HEARTBEAT_INTERVAL,
            )
        status = f"STATUS=claiming, {self.concurrency} threads, queues {','.join(self.queues or ['all'])}"
        notify("READY=1", status, f"MAINPID={os.getpid()}")

    def _say_stopping(self) -> None:
        """Mark the row stopping (``workflows health``) and tell systemd
        ``STOPPING=1``; a process that restarts itself only says so in its
        status (its pid stays, and it says ``READY=1`` again). The row is
        written on a thread of its own: a database that does not answer must
        not hold up the stop's grace and release."""

        def mark() -> None:
            try:
                worker_rows.stopping(self.worker_id)
            finally:
                connections.close_all()

        threading.Thread(target=mark, name="orchestration-stopping", daemon=True).start()
        if self.restart_because is None:
            notify("STOPPING=1", f"STATUS=stopping: running steps finish within {self.shutdown_grace:g}s")
        else:
            notify("STATUS=restarting: abandoned step bodies reached MAX_ABANDONED_BODIES")

    def _restart_at_the_cap(self) -> None:
        """Stop, to restart (``worker.restart``), once the step bodies abandoned
        and still running reach ``most_abandoned``: no close reaches a body in a
        C call or a busy loop, and each holds a thread and its memory."""
        abandoned = timeouts.abandoned_bodies()
        if len(abandoned) < self.most_abandoned:
            return
        self.restart_because = abandoned[-1]
        logger.warning(
            "worker %s: %d abandoned step bodies still run (MAX_ABANDONED_BODIES %d), the last of %s; stopping "
            "claiming, finishing running steps (up to %ss), releasing the rest, then restarting",
            self.worker_id,
            len(abandoned),
            self.most_abandoned,
            self.restart_because,
            self.shutdown_grace,
        )
        self.stop()

    def _release_all_held(self) -> None:
        for run in self.dispatcher.held.snapshot():
            run.lost.set()  # the thread, still in a step body, must write nothing more
            self.dispatcher.give_back(run)

    # -- worker threads --------------------------------------------------

    def _worker_thread(self) -> None:
        try:
            self._worker_loop()
        except BaseException:
            self._thread_died(threading.current_thread().name)

    def _worker_loop(self) -> None:
        failures = 0
        dispatcher = self.dispatcher
        try:
            while not self.stopping.is_set():
                try:
                    run = dispatcher.next_run()
                    failures = 0
                    self.outage.over()
                except Exception as exc:
                    failures += 1
                    if is_outage(exc):
                        self._database_unavailable(exc, failures)
                        continue
                    # Never let the thread die: log, drop the connection, retry shortly.
                    logger.exception("worker %s: claiming failed", self.worker_id)
                    reset_connection()
                    wait_to_reconnect(self.stopping, failures)
                    continue
                if run is None:
                    if self.burst:
                        return
                    dispatcher.idle()
                    continue
                try:
                    self._execute_held(run)
                except BaseException:
                    # Not even a bug here may kill the thread; the workflow is
                    # reclaimed as stuck if its outcome was not written.
                    logger.exception("workflow %s: unexpected error in the worker", run.id)
                    reset_connection()
        finally:
            dispatcher.flush_finished()
            dispatcher.release_waiting()
            connections.close_all()

    def _execute_held(self, run: Lease) -> None:
        if self.shared_loop is not None and self.shared_loop.take(run):
            return  # the loop runs it; this thread claims the next
        dispatcher = self.dispatcher
        dispatcher.held.add(run)
        run.outage = self._outage
        outcome = Outcome.ABANDONED
        started = time.monotonic()
        try:
            outcome = execute(run, should_release=self.stopping.is_set, finish_later=dispatcher.finish)
        finally:
            dispatcher.note_run(outcome, time.monotonic() - started)
            if outcome != Outcome.FINISHING:  # held until its completion is written
                dispatcher.held.discard(run)

    def _database_unavailable(self, exc: BaseException, failures: int) -> None:
        self.outage.wait(exc, failures, self.stopping)

    def _write_unavailable(self, exc: BaseException, failures: int) -> None:
        # A held run's write waits through a shutdown's grace period too: only
        # ``stop_now`` (which also makes the write give up) cuts its wait short.
        self.outage.wait(exc, failures, self.stop_now)

    def _give_up(self) -> None:
        """The database was unavailable for ``give_up_after`` seconds: stop, releasing
        nothing that an outage keeps it from writing (its runs are reclaimed as stuck)."""
        logger.error("worker %s: %s; stopping", self.worker_id, self.outage.gave_up)
        self.stop()
        self.stop_now.set()

"""The ``runworkers`` process: worker threads, the listener, the heartbeat and
the stuck-workflow sweep.

Each worker thread has its own database connection (Django's connections are
per thread). It claims in a short transaction, runs user code outside any
transaction, and makes every write through ``queue``'s fenced functions.
Recovery never executes anything: stuck workflows go back to pending and are
claimed like any other.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.utils import timezone

from . import queue
from .conf import conf
from .context import ReleaseRequested, Suspend, WorkflowContext
from .errors import (
    DeadlineExceeded,
    InvalidWorkflowInput,
    LeaseLost,
    NonDeterministicWorkflow,
    PermanentError,
    UnknownWorkflowType,
    WorkflowCancelled,
)
from .registry import get_workflow
from .schedules import scheduled_workflows, start_due_runs
from .sql import NOTIFY_CHANNEL, listen_statement
from .validation import to_json_text

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors that fail the workflow at once: retrying cannot fix them.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    PermanentError,
    UnknownWorkflowType,
    NonDeterministicWorkflow,
    InvalidWorkflowInput,
)

#: Runs are claimed ahead of the threads (see ``Worker._claim_ahead``) only
#: while this process's recent attempts took less than this many seconds on
#: average, so a run claimed ahead waits about that long for a thread.
CLAIM_AHEAD_WHILE_RUNS_UNDER = 0.05
#: A run claimed ahead that no thread has started after this many seconds
#: (every thread met a long run) goes back to pending for any worker.
CLAIM_AHEAD_TIMEOUT = 1.0

#: Errors that mean "the database went away", not "this workflow is broken".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)


def worker_identity() -> str:
    """Host, pid and a random nonce: unique even when a restarted container
    reuses a host name and pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _reset_connection() -> None:
    """Drop this thread's connection so the next query reconnects."""
    with contextlib.suppress(DatabaseError):
        connections[conf.DATABASE].close()


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
    ) -> None:
        self.concurrency = concurrency or conf.CONCURRENCY
        #: Runs kept claimed ahead of the threads (see ``_claim_ahead``).
        claim_ahead = conf.CLAIM_AHEAD if claim_ahead is None else claim_ahead
        self.claim_ahead: int = self.concurrency if claim_ahead is None else claim_ahead
        self.queues = queues or None
        self.burst = burst
        self.poll_interval = conf.POLL_INTERVAL if poll_interval is None else poll_interval
        self.shutdown_grace = conf.SHUTDOWN_GRACE if shutdown_grace is None else shutdown_grace
        self.listen = listen
        self.worker_id = worker_identity()
        #: First signal: claim nothing more, release held workflows at their next step boundary.
        self.stopping = threading.Event()
        #: Second signal or grace expired: release everything now.
        self.stop_now = threading.Event()
        self._wakeup = threading.Condition()
        self._held: dict[Any, queue.ClaimedRun] = {}
        self._held_lock = threading.Lock()
        # The threads' hand-off (see ``_next_run``), all guarded by ``_handoff``:
        #: claimed for a thread that has not taken it yet;
        self._unstarted: collections.deque[queue.ClaimedRun] = collections.deque()
        #: runs finished by this process's threads, to complete with the next claim;
        self._finished: list[queue.FinishedRun] = []
        #: threads in ``_next_run``; whether one of them is in a claim round trip;
        self._asking = 0
        self._claiming = False
        #: claims begun so far, and the number of the last one that found less than it asked for.
        self._claims = 0
        self._last_short_claim = 0
        #: A moving average of this process's attempts' durations, in seconds (None before the first).
        self._recent_run_seconds: float | None = None
        self._handoff = threading.Condition()
        self._service_stop = threading.Event()
        self.completed = 0
        self.failed = 0

    # -- lifecycle -------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, with ``burst``, until nothing is due); return the exit status."""
        in_main_thread = threading.current_thread() is threading.main_thread()
        # Django, the apps and their modules are loaded: the cyclic garbage
        # collector need not walk them again. Measured, its passes over them
        # were about 30% of a busy worker's CPU.
        gc.freeze()
        self._check_pool()
        previous_handlers = self._install_signal_handlers() if in_main_thread else {}
        logger.info(
            "worker %s starting: %d threads, queues %s%s",
            self.worker_id,
            self.concurrency,
            ",".join(self.queues) if self.queues else "all",
            ", burst" if self.burst else "",
        )
        services = [threading.Thread(target=self._heartbeat_loop, name="orchestration-heartbeat", daemon=True)]
        services.append(threading.Thread(target=self._reclaim_loop, name="orchestration-reclaim", daemon=True))
        if self.listen:
            services.append(threading.Thread(target=self._listen_loop, name="orchestration-listen", daemon=True))
        if not self.burst and conf.SCHEDULER and scheduled_workflows():
            services.append(threading.Thread(target=self._schedule_loop, name="orchestration-schedule", daemon=True))
        for service in services:
            service.start()
        threads = [
            threading.Thread(target=self._worker_loop, name=f"orchestration-worker-{n}", daemon=True)
            for n in range(1, self.concurrency + 1)
        ]
        for thread in threads:
            thread.start()
        try:
            self._wait_for(threads)
        finally:
            self._service_stop.set()
            self._wake_all()
            for service in services:
                service.join(timeout=5)
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            connections.close_all()
        logger.info("worker %s stopped: %d completed, %d failed attempts", self.worker_id, self.completed, self.failed)
        return 0

    def _check_pool(self) -> None:
        """Each thread keeps its connection: a smaller Django pool starves threads."""
        pool = getattr(connections[conf.DATABASE], "pool", None)
        needed = self.concurrency + 4  # the heartbeat, the sweeper, the listener, the scheduler
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

    def stop(self) -> None:
        """Ask the process to stop as a first SIGTERM would."""
        self.stopping.set()
        self._wake_all()

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.stopping.is_set():
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
        deadline: float | None = None
        while any(thread.is_alive() for thread in threads):
            if self.stopping.is_set() and deadline is None:
                deadline = time.monotonic() + self.shutdown_grace
            if deadline is not None and time.monotonic() >= deadline:
                self.stop_now.set()
            if self.stop_now.is_set():
                self._release_all_held()
                return
            self._release_unstarted(waited_longer_than=CLAIM_AHEAD_TIMEOUT)
            for thread in threads:
                thread.join(timeout=0.05)

    def _release_all_held(self) -> None:
        with self._held_lock:
            held = list(self._held.values())
        for run in held:
            run.lost.set()  # the thread, still in a step body, must write nothing more
            self._give_back(run)

    def _give_back(self, run: queue.ClaimedRun) -> None:
        try:
            queue.release(run)
            logger.warning("workflow %s (%s) released to pending", run.id, run.workflow_type)
        except (LeaseLost, WorkflowCancelled):
            pass
        except DatabaseError:
            logger.exception("workflow %s: could not release; it will be reclaimed as stuck", run.id)

    # -- worker threads --------------------------------------------------

    def _worker_loop(self) -> None:
        failures = 0
        try:
            while not self.stopping.is_set():
                try:
                    run = self._next_run()
                    failures = 0
                except CONNECTION_ERRORS as exc:
                    failures += 1
                    self._database_unavailable(exc, failures)
                    continue
                except Exception:
                    # Never let the thread die: log, drop the connection, retry shortly.
                    failures += 1
                    logger.exception("worker %s: claiming failed", self.worker_id)
                    _reset_connection()
                    self.stopping.wait(min(30.0, 0.5 * 2 ** min(failures - 1, 6)))
                    continue
                if run is None:
                    if self.burst:
                        return
                    self._idle()
                    continue
                try:
                    self._execute_held(run)
                except Exception:
                    # A bug here must not kill the thread; the workflow is
                    # reclaimed as stuck if its outcome was not written.
                    logger.exception("workflow %s: unexpected error in the worker", run.id)
                    _reset_connection()
        finally:
            self._flush_finished()
            self._release_unstarted()
            connections.close_all()

    def _next_run(self) -> queue.ClaimedRun | None:
        """A claimed workflow for this thread, or None when nothing is due.

        One thread at a time is the claimer: in one round trip it completes
        every run the threads finished since the last claim and claims a
        workflow (each with its own lease) for each thread asking
        (``queue.finish_and_claim``). The others take theirs from
        ``_unstarted`` as soon as it is there, without waiting for the claim
        round trip in flight, and a thread whose finished run awaits writing
        becomes the next claimer when none is in flight: a completion waits
        for one round trip at most, and a busy process keeps a claim in flight
        while its threads run. (With the claimer's lock held through its round
        trip, threads queued behind it while runs sat claimed in
        ``_unstarted``: a process ran one workflow at a time.)
        """
        with self._handoff:
            self._asking += 1
            asked_before_claim = self._claims
        try:
            while True:
                with self._handoff:
                    while True:
                        if self.stopping.is_set() and not self._finished:
                            return None
                        if self._unstarted and not self.stopping.is_set() and (self._claiming or not self._finished):
                            return self._unstarted.popleft()
                        if not (self._unstarted or self._finished) and self._last_short_claim > asked_before_claim:
                            return None  # a claim made since this thread asked found nothing more for it
                        if not self._claiming:
                            break
                        self._handoff.wait()
                    claim = self._become_claimer(claiming_runs=not self.stopping.is_set())
                self._claim_round(*claim)
        finally:
            with self._handoff:
                self._asking -= 1

    def _become_claimer(self, claiming_runs: bool) -> tuple[int, list[queue.FinishedRun], int]:
        """With ``_handoff`` held and no claim in flight: take the finished runs
        to write, and count the runs to claim (one for each thread asking, less
        those waiting). Returns the claim's number, those runs and that count."""
        self._claiming = True
        self._claims += 1
        finished, self._finished = self._finished, []
        wanted = max(0, self._asking + self._claim_ahead() - len(self._unstarted)) if claiming_runs else 0
        return self._claims, finished, wanted

    def _claim_ahead(self) -> int:
        """How many runs to claim besides one for each thread asking, so that
        ``claim_ahead`` runs wait for the threads still busy: a thread that
        finishes then takes its next run at once instead of waiting for a
        claim round trip, and each round trip writes and claims several runs.
        Measured with four threads a process, the workers' and the database's
        CPU a one-step workflow fell by a quarter and the rate rose by 40%
        (docs/performance.md). A run claimed ahead waits for a thread, so it
        is done only while recent runs were short (a long one turns it off),
        and ``_wait_for`` gives back a run that waited too long anyway."""
        recent = self._recent_run_seconds
        if recent is None or recent >= CLAIM_AHEAD_WHILE_RUNS_UNDER:
            return 0
        return self.claim_ahead

    def _claim_round(self, number: int, finished: list[queue.FinishedRun], wanted: int) -> None:
        """The claimer's round trip; then no claim is in flight, and the
        threads waiting for its end look again."""
        claimed = -1
        try:
            claimed = self._finish_and_claim(finished, wanted)
        finally:
            with self._handoff:
                self._claiming = False
                if 0 <= claimed < wanted:
                    self._last_short_claim = number
                self._handoff.notify_all()

    def _finish_and_claim(self, finished: list[queue.FinishedRun], wanted: int) -> int:
        """As the claimer: complete ``finished``, claim up to ``wanted`` into
        ``_unstarted``; return how many were claimed."""
        try:
            runs, completed = queue.finish_and_claim(self.worker_id, self.queues, finished, wanted)
        except CONNECTION_ERRORS:
            with self._handoff:  # written by the next claim, or released with the rest on shutdown
                self._finished[:0] = finished
            raise
        except DatabaseError:
            if not finished:
                raise
            # One run's completion the database refuses must not hold back the
            # others' forever: complete each on its own, then claim.
            logger.exception("worker %s: completing %d runs together failed; one by one", self.worker_id, len(finished))
            for item in finished:
                self._complete_alone(item)
            return self._finish_and_claim([], wanted)
        with self._held_lock:
            for item in finished:
                self._held.pop(item.run.lease_token, None)
            self._held.update((run.lease_token, run) for run in runs)  # heartbeated, released on shutdown
        with self._handoff:
            self._unstarted.extend(runs)
            # Each thread asking takes one; idle threads take the rest (claimed
            # ahead while they idled: a burst of new work), not the askers one by one.
            idle_threads_wanted = len(self._unstarted) - self._asking
            self._handoff.notify_all()
        if wanted and len(runs) == wanted:
            idle_threads_wanted += 1  # there may be more: an idle thread claims next
        self._wake(idle_threads_wanted)
        for item in finished:
            if item.run.id in completed:
                self.completed += 1
                _log_completed(item.run, item.started)
            else:
                item.run.lost.set()
                logger.warning(
                    "workflow %s (%s) stopped: no longer held by this worker (cancelled or reclaimed); "
                    "its completion was not written",
                    item.run.id,
                    item.run.workflow_type,
                )
        return len(runs)

    def _complete_alone(self, item: queue.FinishedRun) -> None:
        """Complete one finished run in its own transaction; a completion the
        database refuses fails the attempt with the database's error."""
        run = item.run
        with self._held_lock:
            self._held.pop(run.lease_token, None)
        try:
            queue.complete_workflow(run, json.loads(item.output))
        except CONNECTION_ERRORS:
            raise
        except DatabaseError as exc:
            run.checkpoint = None  # it may be what was refused; the step runs again
            outcome = _record_failure(run, None, exc, lambda write: write(), time.monotonic() - item.started)
            logger.warning("workflow %s (%s): its completion was refused: %s", run.id, run.workflow_type, outcome)
            return
        except (LeaseLost, WorkflowCancelled) as exc:
            logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, exc)
            return
        self.completed += 1
        _log_completed(run, item.started)

    def _finish(self, item: queue.FinishedRun) -> None:
        with self._handoff:
            self._finished.append(item)

    def _flush_finished(self) -> None:
        """Complete what is left to complete, claiming nothing (a thread stopping)."""
        with self._handoff:
            while self._claiming:
                self._handoff.wait()
            if not self._finished:
                return
            claim = self._become_claimer(claiming_runs=False)
        try:
            self._claim_round(*claim)
        except DatabaseError:
            logger.exception("worker %s: could not complete finished workflows; they will be released", self.worker_id)

    def _release_unstarted(self, waited_longer_than: float | None = None) -> None:
        """Give back, without spending an attempt, what was claimed for threads
        that stopped, or (``waited_longer_than``) claimed ahead for threads
        that stayed busy so long."""
        with self._handoff:
            if waited_longer_than is None:
                unstarted = list(self._unstarted)
                self._unstarted.clear()
            else:
                unstarted = []
                claimed_before = time.monotonic() - waited_longer_than
                while self._unstarted and self._unstarted[0].claimed_at < claimed_before:
                    unstarted.append(self._unstarted.popleft())
        for run in unstarted:
            with self._held_lock:
                self._held.pop(run.lease_token, None)
            self._give_back(run)

    def _database_unavailable(self, exc: BaseException, failures: int) -> None:
        delay = min(30.0, 0.5 * 2 ** min(failures - 1, 6))
        logger.warning("worker %s: database unavailable (%s); retrying in %.1fs", self.worker_id, exc, delay)
        _reset_connection()
        self.stopping.wait(delay)

    def _idle(self) -> None:
        with self._wakeup:
            self._wakeup.wait(timeout=self.poll_interval)

    def _wake_all(self) -> None:
        with self._wakeup:
            self._wakeup.notify_all()

    def _wake_one(self) -> None:
        """Wake one idle thread. New work wakes one; a thread that claimed as
        many as it asked for wakes the next, and so on while there is more.
        Waking every thread at once for one workflow made them contend for the
        GIL and the claim lock, which cost the one that claims it half a
        millisecond (enqueue-to-start p50 up from 1.7 ms to 2.2 ms, measured)."""
        self._wake(1)

    def _wake(self, threads: int) -> None:
        if threads > 0:
            with self._wakeup:
                self._wakeup.notify(threads)

    def _execute_held(self, run: queue.ClaimedRun) -> None:
        with self._held_lock:
            self._held[run.lease_token] = run
        outcome = "abandoned"
        started = time.monotonic()
        try:
            outcome = execute(
                run, should_release=self.stopping.is_set, durable=self._durable_for(run), finish_later=self._finish
            )
        finally:
            self._note_run_time(time.monotonic() - started)
            if outcome != "finishing":  # held until its completion is written
                with self._held_lock:
                    self._held.pop(run.lease_token, None)
        if outcome == "completed":
            self.completed += 1
        elif outcome in ("failed", "retrying"):
            self.failed += 1

    def _note_run_time(self, seconds: float) -> None:
        """Update the moving average ``_claim_ahead`` reads (a fifth of the way
        to each new attempt's duration: one long run turns claiming ahead off
        at once, and it stays off until a couple of dozen short ones)."""
        recent = self._recent_run_seconds
        self._recent_run_seconds = seconds if recent is None else recent + 0.2 * (seconds - recent)

    def _durable_for(self, run: queue.ClaimedRun) -> Callable[[Callable[[], T]], T]:
        """Retry a fenced write through a database outage while the lease may still be ours."""

        def durable(write: Callable[[], T]) -> T:
            failures = 0
            give_up_at = time.monotonic() + conf.STUCK_AFTER
            while True:
                try:
                    return write()
                except CONNECTION_ERRORS as exc:
                    failures += 1
                    if run.lost.is_set() or self.stop_now.is_set() or time.monotonic() > give_up_at:
                        raise LeaseLost(f"Workflow {run.id}: database unavailable too long ({exc})") from exc
                    self._database_unavailable(exc, failures)

        return durable

    # -- services --------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = conf.HEARTBEAT_INTERVAL
        try:
            while not self._service_stop.wait(interval):
                with self._held_lock:
                    held = list(self._held.values())
                try:
                    for run in queue.heartbeat(held):
                        with self._held_lock:
                            still_running = run.lease_token in self._held
                        if still_running:  # not merely finished since the snapshot
                            logger.warning("workflow %s: lease lost (reclaimed or cancelled); stopping it", run.id)
                            run.lost.set()
                except CONNECTION_ERRORS as exc:
                    logger.warning("worker %s: heartbeat failed (%s)", self.worker_id, exc)
                    _reset_connection()
        finally:
            connections.close_all()

    def _reclaim_loop(self) -> None:
        interval = max(0.5, min(conf.STUCK_AFTER / 4, 60.0))
        try:
            while True:
                try:
                    queue.reclaim_stuck()
                except CONNECTION_ERRORS as exc:
                    logger.warning("worker %s: stuck sweep failed (%s)", self.worker_id, exc)
                    _reset_connection()
                if self._service_stop.wait(interval):
                    return
        finally:
            connections.close_all()

    def _schedule_loop(self) -> None:
        """Start the run of each schedule's tick; the idempotency key makes it one run per tick."""
        started_ticks: dict[str, Any] = {}
        try:
            while True:
                try:
                    start_due_runs(started_ticks)
                except CONNECTION_ERRORS as exc:
                    logger.warning("worker %s: schedule check failed (%s)", self.worker_id, exc)
                    _reset_connection()
                except Exception:
                    logger.exception("worker %s: schedule check failed", self.worker_id)
                if self._service_stop.wait(min(1.0, self.poll_interval)):
                    return
        finally:
            connections.close_all()

    def _listen_loop(self) -> None:
        """Wake idle threads on NOTIFY; polling covers anything missed meanwhile."""
        failures = 0
        try:
            while not self._service_stop.is_set():
                try:
                    connection = connections[conf.DATABASE]
                    connection.ensure_connection()
                    pg = connection.connection
                    pg.execute(listen_statement())
                    if not self._notifications_arrive(pg):
                        logger.warning(
                            "worker %s: LISTEN receives nothing on this connection (a pooler in transaction mode, "
                            "such as PgBouncer?); polling every %ss instead",
                            self.worker_id,
                            self.poll_interval,
                        )
                        return
                    failures = 0
                    self._wake_all()  # anything sent while we were not listening
                    while not self._service_stop.is_set():
                        for notice in pg.notifies(timeout=1.0):
                            if self.queues is None or notice.payload in self.queues:
                                self._wake_one()
                except Exception as exc:  # raw psycopg errors too: this connection is not Django-wrapped
                    failures += 1
                    logger.warning("worker %s: LISTEN failed (%s); polling meanwhile", self.worker_id, exc)
                    _reset_connection()
                    self._service_stop.wait(min(30.0, 0.5 * 2 ** min(failures, 6)))
        finally:
            connections.close_all()

    def _notifications_arrive(self, pg: Any) -> bool:
        """Notify from another connection and wait for it here. Behind a pooler
        in transaction mode LISTEN succeeds, but on a server connection that
        goes back to the pool at once, and nothing ever arrives. (Notifying
        from this connection could borrow that very server connection, and
        deliver the notification to us once, by chance.)"""
        probe = f"probe:{self.worker_id}"
        sender = connections.create_connection(conf.DATABASE)
        try:
            with sender.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, probe])
        finally:
            sender.close()
        for notice in pg.notifies(timeout=5.0):
            if notice.payload == probe:
                return True
            self._wake_all()  # real work announced meanwhile
        return False


def execute(
    run: queue.ClaimedRun,
    *,
    should_release: Callable[[], bool] = lambda: False,
    durable: Callable[[Callable[[], Any]], Any] | None = None,
    finish_later: Callable[[queue.FinishedRun], None] | None = None,
) -> str:
    """Run one claimed attempt of a workflow and record its outcome.

    Returns ``completed``, ``retrying``, ``failed``, ``released`` or ``abandoned``
    (the lease was lost or the workflow cancelled: nothing more is written).
    With ``finish_later``, a run that returned and has no parent to wake is
    handed to it instead of being completed here, and ``finishing`` returned:
    the worker writes its completion with its next claim.
    Never raises for anything the workflow does.
    """
    write = durable or (lambda fn: fn())
    started = time.monotonic()
    ctx: WorkflowContext | None = None
    try:
        if run.deadline is not None and timezone.now() >= run.deadline:
            raise DeadlineExceeded()
        definition = get_workflow(run.workflow_type)
        recorded = write(lambda: queue.recorded_steps(run))
        ctx = WorkflowContext(run, recorded, should_release=should_release, durable=write)
        result = definition.function(ctx, run.input_data)
        encoded = to_json_text(result, f"The return value of workflow {run.workflow_type!r}")
        if finish_later is not None and run.parent_id is None and run.placeholder is None:
            finish_later(queue.FinishedRun(run, encoded, started))
            return "finishing"
        output = json.loads(encoded)  # as jsonb will read it back
        write(lambda: queue.complete_workflow(run, output))
    except (LeaseLost, WorkflowCancelled) as exc:
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, exc)
        return "abandoned"
    except ReleaseRequested:
        return _settle(run, write, lambda: queue.release(run), "released", "released to pending for shutdown")
    except Suspend as wait:
        until, waiting_for, ready = wait.until, wait.waiting_for, wait.ready
        return _settle(
            run, write, lambda: queue.suspend(run, until, waiting_for, ready), "waiting", f"waiting for {waiting_for}"
        )
    except DeadlineExceeded:
        outcome = _settle(run, write, lambda: queue.cancel_past_deadline(run), "cancelled", "cancelled: deadline")
        _wake_parent(run, write)
        return outcome
    except (Exception, SystemExit) as exc:
        outcome = _record_failure(run, ctx, exc, write, time.monotonic() - started)
        if outcome == "failed":
            _wake_parent(run, write)
        return outcome
    _wake_parent(run, write)
    _log_completed(run, started)
    return "completed"


def _log_completed(run: queue.ClaimedRun, started: float) -> None:
    logger.info(
        "workflow %s (%s) completed in %.3fs (attempt %d)",
        run.id,
        run.workflow_type,
        time.monotonic() - started,
        run.attempts,
    )


def _settle(
    run: queue.ClaimedRun,
    write: Callable[[Callable[[], Any]], Any],
    transition: Callable[[], Any],
    outcome: str,
    description: str,
) -> str:
    """Write a non-failure outcome (release, wait, deadline) if the lease still holds."""
    try:
        write(transition)
    except (LeaseLost, WorkflowCancelled):
        return "abandoned"
    logger.info("workflow %s (%s) %s", run.id, run.workflow_type, description)
    return outcome


def _wake_parent(run: queue.ClaimedRun, write: Callable[[Callable[[], Any]], Any]) -> None:
    if run.parent_id is not None:
        parent_id = run.parent_id
        try:
            write(lambda: queue.wake_parent(parent_id))
        except (LeaseLost, DatabaseError):
            logger.warning("workflow %s: could not wake parent %s; it re-checks on its own", run.id, parent_id)


def _record_failure(
    run: queue.ClaimedRun,
    ctx: WorkflowContext | None,
    exc: BaseException,
    write: Callable[[Callable[[], Any]], Any],
    elapsed: float,
) -> str:
    message = f"{type(exc).__name__}: {exc}"
    if ctx is not None and ctx.failed_step is not None:
        number, name = ctx.failed_step
        message = f'Step {number} "{name}" failed: {message}'
    details = "".join(traceback.format_exception(exc))
    retryable = not isinstance(exc, PERMANENT_ERRORS)
    try:
        delay = write(lambda: queue.fail_workflow(run, message, details, retryable=retryable))
    except (LeaseLost, WorkflowCancelled) as lost:
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, lost)
        return "abandoned"
    if delay is not None:
        logger.warning(
            "workflow %s (%s) attempt %d of %d failed after %.3fs, retrying in %.1fs: %s",
            run.id,
            run.workflow_type,
            run.attempts,
            run.max_retries + 1,
            elapsed,
            delay,
            message,
        )
        return "retrying"
    logger.error(
        "workflow %s (%s) failed after %.3fs (attempt %d of %d): %s",
        run.id,
        run.workflow_type,
        elapsed,
        run.attempts,
        run.max_retries + 1,
        message,
    )
    return "failed"

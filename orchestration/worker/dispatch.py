"""The hand-off between a process's worker threads: who claims, which thread
takes which run, and completions written with the next claim.

One thread at a time is the claimer: in one round trip it completes every run
the threads finished since the last claim and claims a run (each with its own
lease) for each thread asking (``claims.finish_and_claim``). The others take
theirs from the runs waiting as soon as they are there, without waiting for
the claim in flight, and a thread whose finished run awaits writing becomes
the next claimer when none is in flight: a completion waits for one round trip
at most, and a busy process keeps a claim in flight while its threads run.
New work announced while a thread idles is claimed by the process's listener
thread itself, the first claimer then, for the idle threads
(``claim_announced``): the claim leaves before any thread has woken.

While the process's runs are short, it claims ahead: runs wait for the busy
threads, which take one at once when they finish, and each round trip writes
and claims several runs. By default it keeps as many waiting as its threads
finish in about ``CLAIM_AHEAD_WHILE_RUNS_UNDER``, one to
``MOST_CLAIMED_AHEAD_A_THREAD`` a thread: the shorter the runs, the fewer
round trips, thread wake-ups and context switches a run costs, while a run
claimed ahead still waits no longer than that for a thread. A run claimed
ahead that waited too long goes back to pending for any worker
(``release_waiting``). Under a queue's concurrency limit it claims ahead too,
and a run waiting holds a slot like a running one (claiming nothing ahead
there kept the threads waiting on every claim), but only up to the
process's share of the limit (``claim.rules.concurrency_share``): one process
claiming ahead must not hold the slots the threads of the others would run. A
thread asking is always claimed for, share or not. A process that also serves
queues without such a limit claims ahead there as it would without it: the
share caps only the runs its claim takes of the limited queues
(``_limited_room``). A process that holds all of its share waits, while runs
are short, for its other runs before it claims, so that one round trip swaps
them all (``_gathering``): a completion then waits besides for about as long
as those runs take, 50 ms at most (``CLAIM_AHEAD_WHILE_RUNS_UNDER``).
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time

from django.db import DatabaseError

from ..claim.claims import FinishedRun, finish_and_claim, only_handed_over
from ..claim.lease import Lease
from ..claim.rules import RulesCache
from ..errors import LeaseLost
from ..outages import is_outage
from .execution import Outcome, log_completed, record_failure
from .held import HeldRuns

logger = logging.getLogger(__name__)

#: Runs are claimed ahead of the threads only while this process's recent
#: attempts took less than this many seconds on average, so a run claimed
#: ahead waits about that long for a thread.
CLAIM_AHEAD_WHILE_RUNS_UNDER = 0.05
#: By default (``CLAIM_AHEAD`` None) a process claims ahead as many runs as its
#: threads finish in about ``CLAIM_AHEAD_WHILE_RUNS_UNDER``, at most this many a thread.
MOST_CLAIMED_AHEAD_A_THREAD = 4
#: A run claimed ahead that no thread has started after this many seconds
#: (every thread met a long run) goes back to pending for any worker.
CLAIM_AHEAD_TIMEOUT = 1.0


class Dispatcher:
    """Hands claimed runs to a process's threads; see the module's docstring."""

    def __init__(
        self,
        worker_id: str,
        queues: list[str] | None,
        *,
        claim_ahead: int | None,
        poll_interval: float,
        stopping: threading.Event,
        threads: int = 1,
    ) -> None:
        self.worker_id = worker_id
        self.queues = queues
        #: Runs to claim ahead while runs are short; None: as many as the threads finish in about 50 ms.
        self.claim_ahead = claim_ahead
        self.threads = threads
        self.poll_interval = poll_interval
        self.stopping = stopping
        self.held = HeldRuns()
        #: The rules of the queues served and this process's share of their limits, read again once a poll interval.
        self.rules = RulesCache(queues, poll_interval, worker_id, threads)
        self.completed = 0
        self.failed = 0
        self._wakeup = threading.Condition()
        self._listening = False
        # The hand-off, all guarded by ``_handoff``:
        self._handoff = threading.Condition()
        #: claimed for a thread that has not taken it yet;
        self._waiting: collections.deque[Lease] = collections.deque()
        #: runs finished by this process's threads, to complete with the next claim;
        self._finished: list[FinishedRun] = []
        #: threads in ``next_run``; whether one of them is in a claim round trip;
        self._asking = 0
        self._claiming = False
        #: claims begun so far, and the number of the last one that found less than it asked for.
        self._claims = 0
        self._last_short_claim = 0
        #: A moving average of this process's attempts' durations, in seconds (None before the first).
        self._recent_run_seconds: float | None = None
        #: Threads running a run they took here (each thread's ``running`` says whether it is one).
        self._executing = 0
        self._thread = threading.local()
        #: Until when the next claim waits for the process's other runs (``_gathering``); None: it does not.
        self._gather_until: float | None = None

    # -- what the threads call ------------------------------------------------------

    def next_run(self) -> Lease | None:
        """A claimed run for this thread, or None when nothing is due (or the
        process is stopping and nothing awaits writing)."""
        self.rules.current()  # the share the claim below is sized by, read again once a poll interval
        with self._handoff:
            self._asking += 1
            asked_before_claim = self._claims
            if self._thread.__dict__.pop("running", False):  # its last run has ended
                self._executing -= 1
                if self._gather_until is not None:
                    self._handoff.notify_all()
        try:
            while True:
                with self._handoff:
                    while True:
                        if self.stopping.is_set() and not self._finished:
                            return None
                        gathering = not self._claiming and self._gathering()
                        if (
                            self._waiting
                            and not self.stopping.is_set()
                            and (self._claiming or not self._finished or gathering)
                        ):
                            self._executing += 1
                            self._thread.running = True
                            return self._waiting.popleft()
                        if not (self._waiting or self._finished) and self._last_short_claim > asked_before_claim:
                            return None  # a claim made since this thread asked found nothing more for it
                        if gathering:
                            self._handoff.wait(max(0.0, (self._gather_until or 0.0) - time.monotonic()))
                            continue
                        if not self._claiming:
                            break
                        self._handoff.wait()
                    claim = self._become_claimer(claiming_runs=not self.stopping.is_set())
                self._claim_round(*claim)
        finally:
            with self._handoff:
                self._asking -= 1

    def finish(self, item: FinishedRun) -> None:
        """A run returned: its completion goes with the process's next claim."""
        with self._handoff:
            self._finished.append(item)

    def note_run(self, outcome: Outcome, seconds: float, average: bool = True) -> None:
        """Count an attempt's outcome and fold its duration into the moving
        average ``claim_ahead_now`` reads (a fifth of the way to each new one:
        one long run turns claiming ahead off at once, and it stays off until a
        couple of dozen short ones). Not with ``average=False``: a run of the
        shared loop, which held no thread."""
        if outcome == Outcome.COMPLETED:
            self.completed += 1
        elif outcome in (Outcome.FAILED, Outcome.RETRYING):
            self.failed += 1
        if not average:
            return
        recent = self._recent_run_seconds
        self._recent_run_seconds = seconds if recent is None else recent + 0.2 * (seconds - recent)

    @property
    def recent_run_seconds(self) -> float | None:
        return self._recent_run_seconds

    def claim_ahead_now(self) -> int:
        """How many runs to claim besides one for each thread asking: none
        before a run finished or while recent runs were long; else the
        process's ``claim_ahead``, or by default as many as its threads finish
        in about ``CLAIM_AHEAD_WHILE_RUNS_UNDER`` (one to
        ``MOST_CLAIMED_AHEAD_A_THREAD`` a thread)."""
        recent = self._recent_run_seconds
        if recent is None or recent >= CLAIM_AHEAD_WHILE_RUNS_UNDER:
            return 0
        if self.claim_ahead is not None:
            return self.claim_ahead
        return self.threads * min(MOST_CLAIMED_AHEAD_A_THREAD, int(CLAIM_AHEAD_WHILE_RUNS_UNDER / recent))

    @property
    def waiting(self) -> tuple[Lease, ...]:
        """The runs claimed for threads that have not taken them yet, oldest first."""
        with self._handoff:
            return tuple(self._waiting)

    @property
    def awaiting_completion(self) -> int:
        """Finished runs whose completion is not written yet."""
        with self._handoff:
            return len(self._finished)

    def offer(self, runs: list[Lease]) -> None:
        """Runs claimed for this process's threads to take (held from now on)."""
        self.held.add(*runs)
        with self._handoff:
            self._waiting.extend(runs)
            self._handoff.notify_all()

    def flush_finished(self) -> None:
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

    def release_waiting(self, older_than: float | None = None) -> None:
        """Give back, without spending an attempt, every run waiting for a thread
        (the threads stopped), or those claimed more than ``older_than`` seconds
        ago (claimed ahead for threads that stayed busy so long)."""
        with self._handoff:
            if older_than is None:
                released = list(self._waiting)
                self._waiting.clear()
            else:
                released = []
                claimed_before = time.monotonic() - older_than
                while self._waiting and self._waiting[0].claimed_at < claimed_before:
                    released.append(self._waiting.popleft())
        for run in released:
            self.give_back(run)

    def give_back(self, run: Lease) -> None:
        """Release a held run to pending, its attempt unspent."""
        self.held.discard(run)
        try:
            run.release()
            logger.warning("workflow %s (%s) released to pending", run.id, run.workflow_type)
        except LeaseLost:
            pass
        except DatabaseError:
            logger.exception("workflow %s: could not release; it will be reclaimed as stuck", run.id)

    def claim_announced(self, announced: int = 1) -> None:
        """``announced`` runs were announced (NOTIFY): while a thread idles, no
        claim is in flight and no run waits, claim here, on the listener's thread, as
        the idle threads would (one each, up to ``announced``), and wake them
        for what it found, without waiting for one to wake first (about 0.2
        ms). Otherwise, or if the claim fails but for the connection, wake them."""
        self.rules.current()  # the share the claim is sized by, as in ``next_run``
        with self._handoff:
            idle = min(announced, self.threads - self._asking - self._executing)
            if self._claiming or self._waiting or idle <= 0 or self.stopping.is_set():
                claim = None
            else:
                claim = self._become_claimer(claiming_runs=True, idle=idle)
        try:
            if claim is not None:
                self._claim_round(*claim)
                return
        except Exception as exc:
            if is_outage(exc):
                self.wake(announced)
                raise  # the listener reconnects
            logger.exception("worker %s: claiming announced work failed; threads claim instead", self.worker_id)
        self.wake(announced)

    # -- idle threads ------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        """Whether the process's listener hears new work announced (``set_listening``)."""
        return self._listening

    def set_listening(self, listening: bool) -> bool:
        """The listener hears new work announced (True) or not (False), and
        whether that changed; the idle threads wake, to poll or to stop."""
        changed, self._listening = listening != self._listening, listening
        self.wake_all()
        return changed

    def idle(self) -> None:
        """Wait for new work (a wake-up), or the next poll when nothing would
        announce it: no listener, or a served queue that is paused or limited
        (a slot or a rate's window that frees is announced by no one)."""
        polls = not self._listening or self.rules.known.limited
        with self._wakeup:
            self._wakeup.wait(timeout=self.poll_interval if polls else None)

    def wake_all(self) -> None:
        with self._wakeup:
            self._wakeup.notify_all()

    def wake(self, threads: int = 1) -> None:
        """Wake ``threads`` idle threads. New work wakes one; a thread that claimed
        as many as it asked for wakes the next, and so on while there is more:
        waking every thread for one run makes them contend for the GIL and the
        hand-off, which delays the one that takes it."""
        if threads > 0:
            with self._wakeup:
                self._wakeup.notify(threads)

    # -- the claimer -------------------------------------------------------------------

    def _gathering(self) -> bool:
        """With ``_handoff`` held and no claim in flight: whether the next claim
        waits. A process that holds all of its share of a concurrency limit
        can claim no more than it completes; claiming as soon as one run
        finished, one round trip swaps the runs finished before it and the
        next those finished during it, each a few. So while runs are short,
        it waits for the process's other runs (those running, and those
        waiting for a thread, which the threads asking take meanwhile) to
        finish too, for about as long as they take, and one claim swaps all."""
        share = self.rules.share
        recent = self._recent_run_seconds
        if (
            share is None
            or recent is None
            or recent >= CLAIM_AHEAD_WHILE_RUNS_UNDER
            or self.stopping.is_set()
            or not (self._executing or self._waiting)
            or len(self.held) < share  # what it holds in all, before counting the limited queues' runs
            or self._holding() < share
        ):
            self._gather_until = None
            return False
        now = time.monotonic()
        if self._gather_until is None:
            others = self._executing + len(self._waiting)
            self._gather_until = now + min(CLAIM_AHEAD_WHILE_RUNS_UNDER, recent * others)
            self._handoff.notify_all()  # the threads asking take the runs waiting
        elif now >= self._gather_until:
            self._gather_until = None
            return False
        return True

    def _become_claimer(self, claiming_runs: bool, idle: int = 0) -> tuple[int, list[FinishedRun], int, int | None]:
        """With ``_handoff`` held and no claim in flight: take the finished runs
        to write, and count the runs to claim (one for each thread asking and
        each of ``idle`` threads claimed for, less those waiting, and ahead up
        to the process's share of a concurrency limit). Returns the claim's
        number, those runs, that count, and how many of them may be of the
        limited queues (None: all; see ``_limited_room``)."""
        self._claiming = True
        self._claims += 1
        finished, self._finished = self._finished, []
        if not claiming_runs:
            return self._claims, finished, 0, None
        unserved = self._asking + idle - len(self._waiting)
        wanted = max(0, unserved + self.claim_ahead_now())
        room = self._limited_room(unserved, finished)
        if room is not None and not self.rules.mixed:
            return self._claims, finished, min(wanted, room), None
        return self._claims, finished, wanted, None if room is None else min(wanted, room)

    def _limited_room(self, unserved: int, finished: list[FinishedRun]) -> int | None:
        """How many runs of the queues with a concurrency limit the next claim
        may take: the process's share, less what it holds of them once
        ``finished`` is completed, but always one for each thread asking (None:
        no such limit). A process that serves only such queues claims no more
        in all; one that serves others too claims ahead there as it would
        without the limit, and its claim takes no more of them."""
        share = self.rules.share
        if share is None:
            return None
        return max(0, unserved, share - self._holding(finished))

    def _holding(self, finished: list[FinishedRun] | None = None) -> int:
        """The runs this process holds of the queues with a concurrency limit (less ``finished``'s)."""
        limited = self.rules.limited_queues
        if not self.rules.mixed:
            return len(self.held) - len(finished or ())
        held = sum(run.queue in limited for run in self.held.snapshot())
        return held - sum(item.run.queue in limited for item in finished or ())

    def _claim_round(
        self, number: int, finished: list[FinishedRun], wanted: int, limited_room: int | None = None
    ) -> None:
        """The claimer's round trip; then no claim is in flight, and the
        threads waiting for its end look again."""
        claimed = -1
        try:
            claimed = self._finish_and_claim(finished, wanted, limited_room)
        finally:
            with self._handoff:
                self._claiming = False
                if 0 <= claimed < wanted and not only_handed_over(self.rules.known, finished, wanted, limited_room):
                    self._last_short_claim = number
                self._handoff.notify_all()

    def _finish_and_claim(self, finished: list[FinishedRun], wanted: int, limited_room: int | None = None) -> int:
        """Complete ``finished``, claim up to ``wanted`` for the threads (up to
        ``limited_room`` of queues with a concurrency limit); return how many were claimed."""
        try:
            rules = self.rules.current()
            runs, completed = finish_and_claim(
                self.worker_id, self.queues, finished, wanted, rules.limited, rules.keys_or_rates, limited_room
            )
        except Exception as exc:
            if is_outage(exc):
                with self._handoff:  # written by the next claim, or released with the rest on shutdown
                    self._finished[:0] = finished
                raise
            if not finished or not isinstance(exc, DatabaseError):
                raise
            # One run's completion the database refuses must not hold back the
            # others' forever: complete each on its own, then claim.
            logger.exception("worker %s: completing %d runs together failed; one by one", self.worker_id, len(finished))
            for item in finished:
                self._complete_alone(item)
            return self._finish_and_claim([], wanted, limited_room)
        self.held.discard(*(item.run for item in finished))
        self.offer(runs)
        with self._handoff:
            # Each thread asking takes one; idle threads take the rest (claimed
            # ahead while they idled: a burst of new work), not the askers one by one.
            idle_threads_wanted = len(self._waiting) - self._asking
        if wanted and len(runs) == wanted:
            idle_threads_wanted += 1  # there may be more: an idle thread claims next
        self.wake(idle_threads_wanted)
        for item in finished:
            if item.run.id in completed:
                self.completed += 1
                log_completed(item.run, item.started)
            else:
                self._not_completed(item.run)
        return len(runs)

    def _not_completed(self, run: Lease) -> None:
        """A finished run whose completion found its lease gone: given back with
        its last step's checkpoint if it was paused, else stopped."""
        try:
            left = run.give_back_paused()
        except LeaseLost:
            pass
        except DatabaseError:
            logger.exception("workflow %s: could not give it back paused", run.id)
        else:
            logger.info("workflow %s (%s) given back %s with its last step", run.id, run.workflow_type, left)
            return
        run.lost.set()
        logger.warning(
            "workflow %s (%s) stopped: no longer held by this worker (cancelled or reclaimed); "
            "its completion was not written",
            run.id,
            run.workflow_type,
        )

    def _complete_alone(self, item: FinishedRun) -> None:
        """Complete one finished run in its own transaction; a completion the
        database refuses fails the attempt with the database's error."""
        run = item.run
        self.held.discard(run)
        try:
            run.complete(json.loads(item.output))
        except DatabaseError as exc:
            if is_outage(exc):
                raise  # InterfaceError, the other outage, is not a DatabaseError: it passes too
            run.checkpoint = None  # it may be what was refused; the step runs again
            outcome = record_failure(run, None, exc, time.monotonic() - item.started)
            logger.warning("workflow %s (%s): its completion was refused: %s", run.id, run.workflow_type, outcome)
            return
        except LeaseLost as exc:
            logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, exc)
            return
        self.completed += 1
        log_completed(run, item.started)

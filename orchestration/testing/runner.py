"""``run_workflows``: a worker in the calling thread, and ``advance``, the runs' time moved forward.

The worker is the engine's: ``worker.dispatch.Dispatcher`` claims (and writes
each completion with the next claim, as a ``runworkers`` thread does) and
``worker.execution.execute`` runs the attempt, so the lease, the
checkpoints, the retries, the children, the events and the deadlines are
what they are in production. It runs on the caller's connection: inside a
test's transaction the claim and every fenced write go through the cursor
(``claim.wire`` does so on its own in a transaction), the engine's
``transaction.atomic`` blocks become savepoints, and nothing is committed.

Time stays the database's (``orchestration.clock``): the claim compares
``run_after`` with the server's ``statement_timestamp()`` and a replay
compares a wait's recorded end with the same clock, so nothing here moves
a clock. What moves is the runs' recorded future: ``advance(delta)`` brings
every moment an unfinished run waits for (``run_after``, ``deadline``, a
timer's ``wake_at``, an event's ``timeout_at``) ``delta`` sooner, which is
what the clock moving ``delta`` forward would do to them; ``skip_waits``
brings a timer's end, a retry's backoff and a delayed start to now.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from typing import Any

from django.db.models import F

from .. import clock
from ..conf import conf
from ..models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowStatus, WorkflowStep
from ..validation import to_timedelta
from ..waits import WAIT_FOREVER, WaitKind, waiting_kind
from ..worker.dispatch import Dispatcher
from ..worker.execution import Outcome, execute
from ..worker.process import worker_identity

#: The statuses of a run that may still wait for something.
UNFINISHED = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING)
#: The keys under which a waiting step records when its wait ends (``ctx.sleep``, ``ctx.wait_for_event``).
WAIT_ENDS = ("wake_at", "timeout_at")


class RunWorkflowsTimeout(TimeoutError):
    """``run_workflows`` ran out of time: a run was still going (``workflow``,
    left pending), and ``finished`` lists the runs it finished before."""

    def __init__(self, message: str, workflow: Workflow | None, finished: list[Workflow]) -> None:
        super().__init__(message)
        self.workflow = workflow
        self.finished = finished


def run_workflows(*, skip_waits: bool = False, timeout: float = 30.0) -> list[Workflow]:
    """Run every due pending run in this thread, on this thread's connection,
    until none is due; return the runs that finished (completed, failed or
    cancelled) meanwhile, in the order they finished.

    A run that waits (for an event, a child, a timer not yet due) stays
    pending: the next call after ``send_event``, or after ``advance``, moves
    it on. With ``skip_waits``, durable sleeps, timers, ``run_after`` and
    retries' backoffs are due at once (events still need ``send_event``;
    deadlines and events' time limits need ``advance``). Past ``timeout``
    seconds the run in hand is released at its next step boundary, left
    pending, and ``RunWorkflowsTimeout`` names it and its last step.
    """
    ends_at = time.monotonic() + timeout
    out_of_time = lambda: time.monotonic() >= ends_at  # noqa: E731 - the run's release check
    dispatcher = Dispatcher(
        f"testing:{worker_identity()}",
        None,
        claim_ahead=0,
        poll_interval=conf.POLL_INTERVAL,
        stopping=threading.Event(),
        threads=1,
    )
    ran: dict[uuid.UUID, None] = {}  # each run by its last attempt here, in that order
    try:
        while True:
            if skip_waits:
                _skip_waits()
            run = dispatcher.next_run()
            if run is None:
                break
            ran.pop(run.id, None)
            ran[run.id] = None
            _attempt(dispatcher, run, out_of_time)
            if out_of_time():
                dispatcher.flush_finished()
                finished = _finished(ran)
                raise RunWorkflowsTimeout(_timed_out(run.id, timeout), _row(run.id), finished)
    finally:
        dispatcher.flush_finished()
        dispatcher.release_waiting()
    return _finished(ran)


def _attempt(dispatcher: Dispatcher, run: Any, out_of_time: Any) -> None:
    """One attempt, as a worker thread makes it (``worker.process.Worker._execute_held``)."""
    dispatcher.held.add(run)
    outcome = Outcome.ABANDONED
    started = time.monotonic()
    try:
        outcome = execute(run, should_release=out_of_time, finish_later=dispatcher.finish)
    finally:
        dispatcher.note_run(outcome, time.monotonic() - started)
        if outcome != Outcome.FINISHING:
            dispatcher.held.discard(run)


def _finished(ran: dict[uuid.UUID, None]) -> list[Workflow]:
    rows = Workflow.objects.using(conf.DATABASE).in_bulk(list(ran))
    return [rows[pk] for pk in ran if pk in rows and rows[pk].status in FINISHED_STATUSES]


def _row(pk: uuid.UUID) -> Workflow | None:
    return Workflow.objects.using(conf.DATABASE).filter(pk=pk).first()


def _timed_out(pk: uuid.UUID, timeout: float) -> str:
    """What ``RunWorkflowsTimeout`` says: the run in hand, its status and its last step."""
    row = _row(pk)
    what = f"workflow {pk}" + (f" ({row.workflow_type})" if row is not None else "")
    left = f", left {row.status}" if row is not None else ""
    last = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id=pk).order_by("-step_number").first()
    at = f'; its last step: {last.step_number} "{last.step_name}" ({last.status})' if last is not None else ""
    return (
        f"run_workflows() gave up after {timeout:g}s: {what} had not finished{left}{at}. "
        "Does it loop for ever, or start runs without end? Raise `timeout` if it only needs longer."
    )


# -- time ---------------------------------------------------------------------------


def advance(delta: float | datetime.timedelta) -> None:
    """Move the runs' time ``delta`` (seconds or a timedelta) forward: every
    unfinished run's ``run_after``, ``deadline`` and waits' ends come that much
    sooner, as if the clock had moved. Then ``run_workflows`` runs what that
    made due: a timer that ended, an event wait past its time limit, a run past
    its deadline."""
    delta = to_timedelta(delta, "advance() delta", allow_zero=True)
    unfinished = _workflows().filter(status__in=UNFINISHED)
    unfinished.filter(run_after__lt=WAIT_FOREVER).update(run_after=F("run_after") - delta)
    unfinished.filter(deadline__isnull=False).update(deadline=F("deadline") - delta)
    for step, details in _waiting_steps(unfinished.values("pk")):
        step.output_data = {
            key: (_moment(value) - delta).isoformat() if key in WAIT_ENDS and value else value
            for key, value in details.items()
        }
        step.save(update_fields=["output_data"])


def _skip_waits() -> None:
    """Bring to now what the unfinished runs wait for but events, children
    and a worker of their type: timers' ends, retries' backoffs, delayed
    starts. A deadline is not moved (``advance`` does)."""
    now = clock.database_now()
    later = _workflows().filter(status__in=UNFINISHED, run_after__gt=now, run_after__lt=WAIT_FOREVER)
    skipped = later.exclude(waiting_kind(WaitKind.EVENT) | waiting_kind(WaitKind.WORKER))
    ids = list(skipped.values_list("pk", flat=True))
    if not ids:
        return
    _workflows().filter(pk__in=ids).update(run_after=now)
    for step, details in _waiting_steps(ids):
        wake_at = details.get("wake_at")
        if wake_at and _moment(wake_at) > now:
            step.output_data = {**details, "wake_at": now.isoformat()}
            step.save(update_fields=["output_data"])


def _waiting_steps(runs: Any) -> list[tuple[WorkflowStep, dict[str, Any]]]:
    """The waiting steps (pending, with a recorded end) of ``runs``, with their details."""
    steps = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id__in=runs, status=StepStatus.PENDING)
    return [
        (step, details)
        for step in steps
        if isinstance(details := step.output_data, dict) and any(details.get(key) for key in WAIT_ENDS)
    ]


def _moment(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _workflows() -> Any:
    return Workflow.objects.using(conf.DATABASE)

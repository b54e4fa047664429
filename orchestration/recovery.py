"""Runs whose worker died: the heartbeat that proves a worker alive, and the
reclaim that sends a silent run back to pending (or fails it).

Recovery never executes anything: a reclaimed run is claimed like any other.
The workers' periodic sweep (``reclaim_stuck``) and an operator's
``requeue_stuck`` make the same decision (``_reclaim``): the attempt the run
was on stays spent; a run with none left, or whose worker died
``MAX_WORKER_DEATHS`` times in a row at the same step, fails instead.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models.functions import Now

from . import transitions, worker_rows
from .conf import conf
from .errors import InvalidTransition
from .listen import notify_new_work
from .models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from .retry import should_retry

if TYPE_CHECKING:
    from .claim.lease import Lease

logger = logging.getLogger(__name__)

WORKER_LOST = "worker lost"

#: Key of the transaction-level advisory lock that lets one process at a time
#: sweep stuck workflows; the others skip the sweep instead of waiting.
RECLAIM_LOCK_KEY = 0x6F7263686573  # "orches"

#: The statuses of a run its worker still holds: running, or paused and not given back yet.
HELD_STATUSES = (WorkflowStatus.RUNNING, WorkflowStatus.PAUSED)

#: The columns ``_reclaim`` decides on.
_DECIDES_ON = ("id", "queue", "attempts", "max_retries", "current_step", "worker_deaths", "lost_at_step", "worker_id")


def try_reclaim_lock(alias: str) -> bool:
    """Take the sweep lock for the current transaction, or return False at once."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [RECLAIM_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def heartbeat(leases: list[Lease]) -> list[Lease]:
    """Refresh ``updated_at`` of every run still held; return the ones lost.

    A run paused while it runs is still held: its worker finishes the step it
    is in and gives it back at the step boundary (``Lease.give_back_paused``).

    A row another transaction locks (a caller's ``send_event`` inside a long
    ``atomic()``) is skipped, not waited for: waiting would stall the beat of
    every other run, and of the worker's row, for as long as that transaction
    lasts. The sweep skips locked rows too, so the skipped run is safe until
    the next beat refreshes it."""
    if not leases:
        return []
    tokens = [lease.lease_token for lease in leases]
    rows = Workflow.objects.using(conf.DATABASE).filter(lease_token__in=tokens)
    running = rows.filter(status=WorkflowStatus.RUNNING)
    with transaction.atomic(using=conf.DATABASE):
        beaten = set(running.select_for_update(skip_locked=True, no_key=True).values_list("lease_token", flat=True))
        running.filter(lease_token__in=beaten).update(updated_at=Now())
    held = beaten
    if len(beaten) < len(tokens):  # lost, paused, or locked by another transaction: a plain read tells which
        unbeaten = rows.filter(status__in=HELD_STATUSES).exclude(lease_token__in=beaten)
        held |= set(unbeaten.values_list("lease_token", flat=True))
    return [lease for lease in leases if lease.lease_token not in held]


@dataclass
class ReclaimReport:
    requeued: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    quarantined: list[uuid.UUID] = field(default_factory=list)
    #: Worker processes marked gone (``worker_rows.mark_gone``).
    workers_gone: list[str] = field(default_factory=list)
    #: The queues of the runs requeued.
    requeued_queues: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.quarantined)


def _stuck(stuck_after: float) -> Any:
    """Running rows with no heartbeat for ``stuck_after`` seconds, locked (skipping rows another holds)."""
    return _running(updated_at__lt=Now() - datetime.timedelta(seconds=stuck_after))


def _running(**where: Any) -> Any:
    return (
        Workflow.objects.using(conf.DATABASE)
        .filter(status=WorkflowStatus.RUNNING, **where)
        .select_for_update(skip_locked=True)
        .values(*_DECIDES_ON)
    )


def reclaim_stuck(stuck_after: float | None = None, batch: int = 500) -> ReclaimReport | None:
    """Send runs whose worker stopped heartbeating back to pending (or fail
    them, see the module's docstring). Returns None when another process holds
    the sweep lock."""
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    report = ReclaimReport()
    with transaction.atomic(using=conf.DATABASE):
        if not try_reclaim_lock(conf.DATABASE):
            return None
        for row in _stuck(stuck_after)[:batch]:
            _reclaim(row, _lost_reason(row), report)
        report.workers_gone = worker_rows.mark_gone(stuck_after)
        # A worker silent that long is dead, though its runs' last heartbeat (a
        # claim made after its row's last beat) may be younger: they go back now,
        # so no run is left running on a worker marked gone.
        if report.workers_gone:
            for row in _running(worker_id__in=report.workers_gone)[:batch]:
                _reclaim(row, _lost_reason(row), report)
        # At commit: idle workers wait for a notification, not a poll.
        for queue in sorted(report.requeued_queues):
            notify_new_work(conf.DATABASE, queue)
    for workflow_id in report.requeued:
        logger.warning("workflow %s: worker lost, requeued", workflow_id)
    for workflow_id in report.failed + report.quarantined:
        logger.error("workflow %s: worker lost, failed", workflow_id)
    return report


def _lost_reason(row: dict[str, Any]) -> str:
    return f"{WORKER_LOST}: {row['worker_id'] or 'a worker'} stopped heartbeating during step {row['current_step'] + 1}"


def requeue_stuck(workflow: transitions.WorkflowRef, stuck_after: float | None = None) -> Workflow:
    """Send a running workflow whose worker stopped heartbeating back to pending.

    Only a workflow with no heartbeat for ``stuck_after`` seconds (default
    ``STUCK_AFTER``) qualifies, so a live worker is never robbed of its work.
    The rules are the workers' own sweep's: the attempt stays spent, the step
    that was running is marked failed, and a run with no attempt left (or in a
    crash loop) fails instead. The dead worker's lease is revoked, so it can
    write nothing more should it wake up.
    """
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    workflow_id = transitions.workflow_id_of(workflow)
    reason = f"requeued by an operator: no heartbeat for {stuck_after:g} seconds"
    with transaction.atomic(using=conf.DATABASE):
        row = _stuck(stuck_after).filter(pk=workflow_id).first()
        if row is None:
            status = Workflow.objects.using(conf.DATABASE).get(pk=workflow_id).status
            raise InvalidTransition(
                f"Cannot requeue workflow {workflow_id}: it is {status}, and only a running workflow "
                f"with no heartbeat for {stuck_after:g} seconds can be."
            )
        _reclaim(row, reason, ReclaimReport())
        return Workflow.objects.using(conf.DATABASE).get(pk=workflow_id)


def _reclaim(row: dict[str, Any], reason: str, report: ReclaimReport) -> None:
    """Requeue, fail or quarantine one locked stuck run, and fail the step it was running."""
    lost_step = row["current_step"] + 1
    deaths = row["worker_deaths"] + 1 if row["lost_at_step"] == lost_step else 1
    steps = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id=row["id"], status=StepStatus.RUNNING)
    steps.fail(reason)
    lost = {"worker_deaths": deaths, "lost_at_step": lost_step}
    rows = Workflow.objects.using(conf.DATABASE).filter(pk=row["id"])
    if deaths >= conf.MAX_WORKER_DEATHS:
        message = (
            f"Quarantined: the worker died {deaths} times in a row during step {lost_step}; "
            "the step may crash its process (os._exit, out of memory). Fix it, then retry the workflow."
        )
        transitions.fail_stuck(rows, message, **lost)
        report.quarantined.append(row["id"])
    elif should_retry(row["attempts"], row["max_retries"]):
        transitions.requeue_stuck(rows, reason, **lost)
        report.requeued.append(row["id"])
        report.requeued_queues.add(row["queue"])
    else:
        message = f"{reason}; no attempts left ({row['attempts']} of {row['max_retries'] + 1})."
        transitions.fail_stuck(rows, message, **lost)
        report.failed.append(row["id"])

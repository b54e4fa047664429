"""What a pending workflow waits for, in one definition.

A waiting workflow is ``pending`` with ``run_after`` at its wake-up time and
``waiting_for`` saying what it waits for, as ``"<kind>: <detail>"``. The engine
writes that text (``Wait.text``), ``send_event`` and a finishing child find the
workflows to wake by it (``waiting_for_event``, ``Wait.parse``), and the admin,
the reports and the demo read it back (``Wait.parse``, ``pending_reason``).
"""

from __future__ import annotations

import datetime
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.db.models.functions import Now

from .conf import conf
from .listen import notify_new_work
from .models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep

#: ``run_after`` of a workflow that waits with no time limit: only ``send_event``
#: or a finishing child wakes it (Python's datetime cannot hold 'infinity').
WAIT_FOREVER = datetime.datetime(9999, 1, 1, tzinfo=datetime.UTC)

#: The finished statuses of a run that will never complete.
UNSUCCESSFUL = (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)

#: ``waiting_for``'s column width.
MAX_TEXT = 200


class WaitKind(enum.StrEnum):
    """What a workflow can wait for; the value is the prefix of its ``waiting_for``,
    the admin's filter value and the overview's column name alike."""

    TIMER = "timer"
    EVENT = "event"
    CHILDREN = "children"
    #: A worker that registers the run's type (claimed by one that does not, during a deploy).
    WORKER = "worker"

    @property
    def label(self) -> str:
        """Words for it: "waiting for {label}"."""
        labels = {"timer": "a timer", "event": "an event", "children": "child workflows", "worker": "a worker"}
        return labels[self.value]


@dataclass(frozen=True)
class Wait:
    """One wait: its kind, what it names (a timer's name, an event's name, the
    children's progress) and, for a timer, when it ends."""

    kind: WaitKind
    detail: str
    until: datetime.datetime | None = None

    @classmethod
    def timer(cls, name: str, wake_at: datetime.datetime) -> Wait:
        return cls(WaitKind.TIMER, name, wake_at)

    @classmethod
    def event(cls, name: str) -> Wait:
        return cls(WaitKind.EVENT, name)

    @classmethod
    def children(cls, finished: int, total: int) -> Wait:
        return cls(WaitKind.CHILDREN, f"{finished} of {total} finished")

    @classmethod
    def worker(cls, workflow_type: str) -> Wait:
        return cls(WaitKind.WORKER, f"one that registers workflow type {workflow_type!r}")

    @property
    def text(self) -> str:
        """The ``waiting_for`` column's value."""
        until = f" until {self.until:%Y-%m-%d %H:%M:%S} UTC" if self.until is not None else ""
        return f"{self.kind.value}: {self.detail}{until}"[:MAX_TEXT]

    @property
    def what(self) -> str:
        """The text without a timer's "until ...", which ``run_after`` says (capped by the deadline)."""
        return f"{self.kind.value}: {self.detail}"

    @classmethod
    def parse(cls, text: str | None) -> Wait | None:
        """The wait a ``waiting_for`` text describes, or None (no wait, or a text
        no kind of wait writes). A timer's end is not read back: ``run_after`` holds it."""
        if not text:
            return None
        kind, separator, detail = text.partition(": ")
        if not separator or kind not in WaitKind._value2member_map_:
            return None
        if kind == WaitKind.TIMER:
            detail = detail.rsplit(" until ", 1)[0]
        return cls(WaitKind(kind), detail)


def waiting_for_event(name: str) -> str:
    """``waiting_for`` of a workflow blocked in ``ctx.wait_for_event(name)``."""
    return Wait.event(name).text


def waiting_kind(kind: WaitKind) -> Q:
    """Workflows whose ``waiting_for`` is a wait of ``kind``."""
    return Q(waiting_for__startswith=f"{kind.value}:")


def awaited_event(status: str, waiting_for: str | None) -> str | None:
    """The event a pending workflow waits for, or None when it waits for none."""
    wait = Wait.parse(waiting_for) if status == "pending" else None
    return wait.detail if wait is not None and wait.kind == WaitKind.EVENT else None


def child_key(parent_id: uuid.UUID, step: int | str = "") -> str:
    """The idempotency key of the child ``ctx.start_child`` starts at ``step`` of
    ``parent_id``, so that a replay finds it instead of starting another; without
    ``step``, the prefix every such key of that parent starts with."""
    return f"child:{parent_id}:{step}"


# -- what the engine reads and wakes -------------------------------------------------


def has_unconsumed_event(workflow_id: uuid.UUID, name: str) -> bool:
    events = WorkflowEvent.objects.using(conf.DATABASE)
    return events.filter(workflow_id=workflow_id, name=name, consumed_by_step__isnull=True).exists()


def workflow_outcomes(ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    rows = _workflows().filter(pk__in=ids).values("id", "workflow_type", "status", "output_data", "error_message")
    return {row["id"]: row for row in rows}


def children_settled(ids: list[uuid.UUID]) -> bool:
    """Whether a parent waiting for the children ``ids`` has something to act on:
    every child finished, or one never will complete (failed, cancelled, or its
    row is gone)."""
    statuses = list(_workflows().filter(pk__in=ids).values_list("status", flat=True))
    if len(statuses) < len(set(ids)):
        return True
    return all(status in FINISHED_STATUSES for status in statuses) or any(status in UNSUCCESSFUL for status in statuses)


def wake_event_waiter(workflow_id: uuid.UUID, name: str, queue: str) -> None:
    """Event ``name`` arrived: a workflow waiting for it becomes due now."""
    waiting = _workflows().filter(pk=workflow_id, status=WorkflowStatus.PENDING, waiting_for=waiting_for_event(name))
    if waiting.update(run_after=None):
        notify_new_work(conf.DATABASE, queue)


def wake_parents(finished: Mapping[uuid.UUID, uuid.UUID]) -> None:
    """Children finished (``{child: its parent}``): each run that waits for one
    of them becomes due now, to re-check them. That is its parent, if it waits
    for children, and any fork of the parent (or of a fork of it) that copied
    the step starting the child and waits for it: a fork shares the children
    its copied steps started (see ``forks``).

    Called in the transaction that finishes the children, after their rows
    changed. Each of these runs is locked first, waiting or not: a run
    suspending at this moment (``Lease.suspend``, whose ``ready()`` re-reads its
    children) either suspends before this (and is woken here) or after this
    transaction commits (and its ``ready()`` sees the children finished). A
    wake-up is never lost between the two. The forks are looked up again once
    the ones known are locked, for a fork made meanwhile.
    """
    parents = set(finished.values())
    locked: dict[uuid.UUID, tuple[str, str | None, str]] = {}
    to_lock = parents | forks_of(parents)
    while to_lock:
        rows = (
            _workflows()
            .select_for_update(no_key=True)
            .filter(pk__in=to_lock)
            .order_by("pk")  # one lock order for every waker
            .values_list("pk", "status", "waiting_for", "queue")
        )
        locked.update((pk, (status, waiting_for, queue)) for pk, status, waiting_for, queue in rows)
        to_lock = forks_of(set(locked)) - set(locked)
    waiting = {
        pk: queue
        for pk, (status, waiting_for, queue) in locked.items()
        if status == WorkflowStatus.PENDING and getattr(Wait.parse(waiting_for), "kind", None) == WaitKind.CHILDREN
    }
    forks = set(waiting) - parents
    if forks:  # a fork is woken only by a child its copied steps started
        awaits = Q()
        for child in finished:
            awaits |= Q(output_data__children__contains=[str(child)])
        steps = WorkflowStep.objects.using(conf.DATABASE).filter(awaits, status=StepStatus.PENDING)
        awaiting = set(steps.filter(workflow_id__in=forks).values_list("workflow_id", flat=True))
        waiting = {pk: queue for pk, queue in waiting.items() if pk in parents or pk in awaiting}
    if waiting and _workflows().filter(pk__in=waiting).update(run_after=None):
        for queue in sorted(set(waiting.values())):
            notify_new_work(conf.DATABASE, queue)


def forks_of(runs: set[uuid.UUID]) -> set[uuid.UUID]:
    """The forks of ``runs``, and the forks of those, and so on (by
    ``idx_workflows_forked_from``: one look-up finding none, for most runs)."""
    found: set[uuid.UUID] = set()
    frontier = runs
    while frontier:
        frontier = set(_workflows().filter(forked_from__in=frontier).values_list("pk", flat=True)) - found - runs
        found |= frontier
    return found


def _workflows() -> Any:
    return Workflow.objects.using(conf.DATABASE)


# -- why a pending workflow is pending --------------------------------------------


class PendingReason(enum.StrEnum):
    """Why a pending workflow is pending. The admin's filter, its status column
    and the overview's queue depth all tell them apart by ``pending_q``."""

    DUE = "due"
    WAITING = "waiting"
    RETRYING = "retrying"
    SCHEDULED = "scheduled"


def pending_reason(
    run_after: datetime.datetime | None, waiting_for: str | None, error_message: str | None, now: datetime.datetime
) -> PendingReason:
    """Why a pending workflow with these columns is pending at ``now``: the Python
    side of ``pending_q``, for a row already loaded."""
    if run_after is None or run_after <= now:
        return PendingReason.DUE
    if waiting_for:
        return PendingReason.WAITING
    return PendingReason.RETRYING if error_message else PendingReason.SCHEDULED


def pending_q(reason: PendingReason | WaitKind) -> Q:
    """The pending workflows that are pending for ``reason`` (or wait for a ``WaitKind``)."""
    pending = Q(status="pending")
    if reason == PendingReason.DUE:
        return pending & (Q(run_after__isnull=True) | Q(run_after__lte=Now()))
    later = pending & Q(run_after__gt=Now())
    if isinstance(reason, WaitKind):
        return later & waiting_kind(reason)
    conditions: dict[PendingReason, dict[str, Any]] = {
        PendingReason.WAITING: {"waiting_for__isnull": False},
        PendingReason.RETRYING: {"waiting_for__isnull": True, "error_message__isnull": False},
        PendingReason.SCHEDULED: {"waiting_for__isnull": True, "error_message__isnull": True},
    }
    return later & Q(**conditions[reason])

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
import json
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import Q
from django.db.models.functions import Now

from .claim.wire import run
from .conf import conf
from .listen import notify_new_work
from .models import (
    StepStatus,
    Workflow,
    WorkflowEvent,
    WorkflowStatus,
    WorkflowStep,
    WorkflowWait,
)

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


#: The statuses of a run that waits: a paused one keeps its wait, and is woken
#: as a pending one is (its ``run_after`` cleared), so the wake-up counts once it is resumed.
WAITING_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.PAUSED)


def awaited_event(status: str, waiting_for: str | None) -> str | None:
    """The event a pending (or paused) workflow waits for, or None when it waits for none."""
    wait = Wait.parse(waiting_for) if status in WAITING_STATUSES else None
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


def id_array(ids: list[uuid.UUID]) -> str:
    """``ids`` as PostgreSQL's text form of a uuid array, one parameter: a list
    of 10,000 UUIDs costs psycopg 1 MB more, and ``pk__in`` a placeholder each
    (a query text of 10,000 ids, made and kept while it runs)."""
    return "{" + ",".join([child.hex for child in ids]) + "}"


#: Of the awaited children ``%(ids)s`` (a child listed twice counts twice), how
#: many finished and how many never will complete (failed, cancelled); a child
#: whose row is gone counts in both.
AWAITED_TALLY = """
SELECT count(*) FILTER (WHERE w.id IS NULL OR w.status IN ('completed', 'failed', 'cancelled')),
       count(*) FILTER (WHERE w.id IS NULL OR w.status IN ('failed', 'cancelled'))
FROM unnest(%(ids)s::uuid[]) AS i(id) LEFT JOIN workflows AS w ON w.id = i.id
"""

#: The outcomes of the awaited children ``%(ids)s``, in their order, one row a
#: listed child: status (NULL: its row is gone), output (as JSON text), error message.
AWAITED_OUTCOMES = """
SELECT w.status, w.output_data, w.error_message
FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS i(id, n) LEFT JOIN workflows AS w ON w.id = i.id
ORDER BY i.n
"""


def awaited_tally(array: str) -> tuple[int, int]:
    """``AWAITED_TALLY`` of the children ``array`` (``id_array``): finished, and never to complete."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(AWAITED_TALLY, {"ids": array})
        finished, unsuccessful = cursor.fetchone()
    return finished, unsuccessful


def awaited_outcomes(array: str) -> Generator[tuple[str | None, Any, str | None]]:
    """The children ``array``'s (``id_array``) statuses, outputs and errors, in
    their order (``AWAITED_OUTCOMES``): made a row at a time, so that a caller
    keeps only what it asked for (and stops at a failure if it wants)."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(AWAITED_OUTCOMES, {"ids": array})
        for status, output, error in cursor:
            yield status, (json.loads(output) if output is not None else None), error


def children_settled(ids: list[uuid.UUID], wake_on_failure: bool = True) -> bool:
    """Whether a parent waiting for the children ``ids`` has something to act on:
    every child finished, or (``wake_on_failure``) one never will complete
    (failed, cancelled), or a child's row is gone."""
    return _awaited_counts(id_array(ids)).settled(wake_on_failure)


def wake_event_waiter(workflow_id: uuid.UUID, name: str, queue: str) -> None:
    """Event ``name`` arrived: a workflow waiting for it becomes due now."""
    waiting = _workflows().filter(pk=workflow_id, status__in=WAITING_STATUSES, waiting_for=waiting_for_event(name))
    if waiting.update(run_after=None):
        notify_new_work(conf.DATABASE, queue)


# -- a wait for children: woken once it can end --------------------------------------
#
# A parent suspending in ``ctx.wait_for`` marks each awaited child that is not
# finished with a new wait (``ARM``): a ``WorkflowWait`` row per slot counting
# the slot's children (a child's slot is a byte of its id, of ``SLOTS``), and a
# head. A child's end counts itself out of its slot (``CHILDREN_FINISHED``);
# the child that empties a slot, and a failed one, then hold the head and look
# at every slot (``SETTLED``); and only a wait found settled (every slot empty,
# or a failure where the wait ends at one) makes the parent due. A parent of
# 10,000 children is claimed once, not once a child, and children ending at
# once hold different slot rows until their commits, not one row: the slot
# counts, like the parent's row before them, are held until the commit that
# counted, so one row for all would let one child end a commit at a time.
#
# Races. Two last children: a slot's counts are made one after the other, each
# on the one committed before it (READ COMMITTED re-evaluates an UPDATE on the
# row version it waited for), so exactly one child empties each slot. The
# children that empty slots take the head in turn, each holding it until its
# commit, and read the slots in a statement after taking it: the last to take
# it sees every other slot's last count committed, finds the wait settled and
# wakes the parent. The last child and the parent suspending: the parent marks
# a child under that child's row lock, and a child ends under it too, so
# either the child ended first (it is not marked, not counted: a wait with none
# left is settled at once, ``ChildrenWait.ready``) or it was marked first (its
# end waits for the parent's commit, then counts itself out). Locks are taken
# in one order: a child's row, its slot, the head, the parent's row; the parent
# marks its children before it takes its own row (the fence).

#: How many slots a wait's count is spread over: a few times the threads that
#: may end children at once, so that two of them rarely count on one row.
SLOTS = 64

#: A child's slot, of its id (a UUIDv7's last byte is random).
_SLOT = f"get_byte(uuid_send(id), 15) %% {SLOTS}"

#: Mark the unfinished children ``%(ids)s`` of run ``%(run)s`` with wait
#: ``%(wait)s`` and count them, per slot and in the head (slot -1); returns the
#: head's count (no row: none marked). Locked in id order first, the order the
#: worker's batched completions lock them in: an UPDATE of thousands of rows
#: locks them in the order it reads the table, and deadlocked with them.
ARM = f"""
WITH awaited AS MATERIALIZED (
    SELECT id FROM workflows
    WHERE id = ANY(%(ids)s::uuid[]) AND parent_id = %(run)s AND status NOT IN ('completed', 'failed', 'cancelled')
    ORDER BY id
    FOR NO KEY UPDATE
), marked AS (
    UPDATE workflows SET awaited_by_wait = %(wait)s
    WHERE id IN (SELECT id FROM awaited)
    RETURNING {_SLOT} AS slot
), counts AS (
    SELECT slot, count(*) AS unsettled FROM marked GROUP BY slot
    UNION ALL
    SELECT -1, count(*) FROM marked HAVING count(*) > 0
), head AS (
    INSERT INTO workflow_waits (wait, slot, workflow_id, step_number, unsettled, wake_on_failure)
    SELECT %(wait)s, slot, %(run)s, %(step)s, unsettled, %(wake_on_failure)s FROM counts
    RETURNING slot, unsettled
)
SELECT unsettled FROM head WHERE slot = -1
"""

#: Of the awaited children ``%(ids)s``, each counted once: those whose row is
#: gone, those that have not finished, and those that failed or were cancelled.
AWAITED_COUNTS = """
SELECT count(DISTINCT i.id) FILTER (WHERE w.id IS NULL),
       count(DISTINCT i.id) FILTER (WHERE w.status NOT IN ('completed', 'failed', 'cancelled')),
       count(DISTINCT i.id) FILTER (WHERE w.status IN ('failed', 'cancelled'))
FROM unnest(%(ids)s::uuid[]) AS i(id) LEFT JOIN workflows AS w ON w.id = i.id
"""

#: The children ``%(children)s`` just ended, in the transaction that ended them
#: (after their rows changed): each counts itself out of its wait's slot.
#: Returns the waits to look at (``SETTLED``): those a slot of which is now
#: empty (``wait``), and those of a failed or cancelled child (``failed``); and, as ``parent``, the
#: parent of a child that counts in no wait, if the parent waits for children
#: with no wait of this kind (one the previous release suspended: woken at each
#: end); and, as ``forked``, a parent that has forks (``wake_forks``: most have none).
CHILDREN_FINISHED = f"""
WITH finished AS MATERIALIZED (
    SELECT id, parent_id, awaited_by_wait AS wait, {_SLOT} AS slot, status IN ('failed', 'cancelled') AS unsuccessful
    FROM workflows
    WHERE id = ANY(%(children)s::uuid[]) AND status IN ('completed', 'failed', 'cancelled')
), slots AS MATERIALIZED (  -- locked in one order: two batches of children of one wait never deadlock
    SELECT w.id, f.ended FROM workflow_waits AS w
    JOIN (SELECT wait, slot, count(*) AS ended FROM finished WHERE wait IS NOT NULL GROUP BY wait, slot) AS f
      ON w.wait = f.wait AND w.slot = f.slot
    ORDER BY w.wait, w.slot
    FOR NO KEY UPDATE OF w
), counted AS (
    UPDATE workflow_waits AS w SET unsettled = w.unsettled - s.ended
    FROM slots AS s WHERE w.id = s.id
    RETURNING w.wait, w.unsettled
)
SELECT 'wait', wait FROM counted WHERE unsettled <= 0
UNION
SELECT 'failed', wait FROM finished WHERE wait IS NOT NULL AND unsuccessful
UNION
SELECT 'parent', f.parent_id FROM finished AS f
WHERE f.wait IS NULL AND f.parent_id IS NOT NULL
  AND NOT EXISTS (SELECT FROM workflow_waits AS w WHERE w.workflow_id = f.parent_id)
UNION
SELECT 'forked', f.parent_id FROM finished AS f
WHERE f.parent_id IS NOT NULL AND EXISTS (SELECT FROM workflows AS k WHERE k.forked_from_id = f.parent_id)
"""

#: The heads of waits ``%(waits)s``, held until the commit, in one order.
HOLD_HEADS = """
SELECT wait FROM workflow_waits WHERE wait = ANY(%(waits)s::uuid[]) AND slot = -1 ORDER BY wait FOR NO KEY UPDATE
"""

#: Of waits ``%(waits)s`` (their heads held: a statement of its own, which sees
#: every count committed before the heads were taken), the runs whose wait is
#: settled: every slot empty, or a failed or cancelled child ``%(failed)s``
#: counts in it and it ends at one.
SETTLED = """
SELECT head.workflow_id FROM workflow_waits AS head
WHERE head.wait = ANY(%(waits)s::uuid[]) AND head.slot = -1
  AND ((head.wake_on_failure AND head.wait = ANY(%(failed)s::uuid[]))
       OR NOT EXISTS (SELECT FROM workflow_waits AS s WHERE s.wait = head.wait AND s.slot >= 0 AND s.unsettled > 0))
"""

#: Make the runs ``%(runs)s`` due if they still wait for children, locked in id order; returns their queues.
#: A paused run's wait ends too: it counts once the run is resumed.
WAKE = """
UPDATE workflows SET run_after = NULL
WHERE id IN (
    SELECT id FROM workflows
    WHERE id = ANY(%(runs)s::uuid[]) AND status IN ('pending', 'paused') AND run_after IS NOT NULL
      AND waiting_for LIKE 'children:%%'
    ORDER BY id
    FOR NO KEY UPDATE
)
RETURNING queue
"""


@dataclass
class ChildrenWait:
    """The wait of run ``workflow_id`` at step ``step_number`` for the children
    ``ids``: ``arm`` it before the run suspends, then ask ``ready``."""

    workflow_id: uuid.UUID
    step_number: int
    ids: list[uuid.UUID]
    #: A failed or cancelled child ends the wait (``wait_for`` without ``return_exceptions``).
    wake_on_failure: bool
    settled: bool = False
    #: Awaited children that are not this run's own (a fork's, shared with the run it
    #: was forked from): they wake it at each end instead (``wake_forks``).
    foreign: bool = False

    def arm(self) -> None:
        """Mark the unfinished children with a new wait counting them (``ARM``),
        and find whether the wait is settled already. In the transaction that
        suspends the run, before its row is taken (see the races above)."""
        array = id_array(self.ids)
        params: dict[str, Any] = {
            "wait": uuid.uuid4(),
            "ids": array,
            "run": self.workflow_id,
            "step": self.step_number,
            "wake_on_failure": self.wake_on_failure,
        }
        with connections[conf.DATABASE].cursor() as cursor:
            cursor.execute(ARM, params)
            head = cursor.fetchone()
            marked = head[0] if head else 0
        # A statement of its own: it sees the ends of the children the marking waited for.
        counts = _awaited_counts(array)
        self.foreign = counts.unfinished > marked
        self.settled = counts.settled(self.wake_on_failure)

    def ready(self) -> bool:
        """Whether the run has something to act on now: in the suspending
        transaction, once the run's row is held (a fork's shared children are
        read again there: they wake it by ``wake_forks``, which takes that row)."""
        return self.settled or (self.foreign and children_settled(self.ids, self.wake_on_failure))


def end_children_waits(workflow_id: uuid.UUID) -> None:
    """The run's waits for children are over (its ``wait_for`` returned or
    failed): their rows go, the slots first and then the heads, each in a
    statement of its own holding no other row, the order a child's end takes
    them in (it may hold a slot and want the head, or the head and want the run's row)."""
    waits = WorkflowWait.objects.using(conf.DATABASE).filter(workflow_id=workflow_id)
    waits.filter(slot__gte=0).delete()
    waits.delete()


def children_finished(finished: Mapping[uuid.UUID, uuid.UUID]) -> None:
    """Children ended (``{child: its parent}``), in the transaction that ended
    them, after their rows changed: they count themselves out of their
    parents' waits (``CHILDREN_FINISHED``), and a parent whose wait is now
    settled (``SETTLED``) is made due; a fork that shares one of them is woken
    too (``wake_forks``). Most ends are one statement: the child that empties
    a slot, or fails, looks at its wait."""
    alias = conf.DATABASE
    found = run(alias, CHILDREN_FINISHED, {"children": list(finished)})  # the hot path's way: see ``wire``
    waits = sorted({wait for kind, wait in found if kind in ("wait", "failed")})
    runs = [parent for kind, parent in found if kind == "parent"]
    if waits:
        run(alias, HOLD_HEADS, {"waits": waits})
        failed = [wait for kind, wait in found if kind == "failed"]
        runs += [parent for (parent,) in run(alias, SETTLED, {"waits": waits, "failed": failed})]
    if runs:
        for queue in sorted({queue for (queue,) in run(alias, WAKE, {"runs": runs})}):
            notify_new_work(alias, queue)
    if any(kind == "forked" for kind, _ in found):
        wake_forks(finished)


def wake_forks(finished: Mapping[uuid.UUID, uuid.UUID]) -> None:
    """Children ended (``{child: its parent}``): each fork of their parents (or
    of a fork of them) that copied the step starting one of them and waits for
    children becomes due now, to re-check its wait: a fork shares the children
    its copied steps started (see ``forks``), and never marks them with a wait
    of its own. A wait records no list of children (the step that started them
    has it), so a fork waiting for others of them is woken too, and waits
    again. One look-up finding no fork, for most runs.

    Each fork is locked first, waiting or not: a fork suspending at this moment
    (``Lease.suspend``, whose ``ready()`` re-reads its shared children once its
    row is held) either suspends before this (and is woken here) or after this
    transaction commits (and its ``ready()`` sees the children finished). The
    forks are looked up again once the ones known are locked, for a fork made
    meanwhile.
    """
    parents = set(finished.values())
    locked: dict[uuid.UUID, tuple[str, str | None, str]] = {}
    to_lock = forks_of(parents)
    while to_lock:
        rows = (
            _workflows()
            .select_for_update(no_key=True)
            .filter(pk__in=to_lock)
            .order_by("pk")  # one lock order for every waker
            .values_list("pk", "status", "waiting_for", "queue")
        )
        locked.update((pk, (status, waiting_for, queue)) for pk, status, waiting_for, queue in rows)
        to_lock = forks_of(set(locked) | parents) - set(locked)
    waiting = {
        pk: queue
        for pk, (status, waiting_for, queue) in locked.items()
        if status in WAITING_STATUSES and getattr(Wait.parse(waiting_for), "kind", None) == WaitKind.CHILDREN
    }
    if not waiting:
        return
    started = Q()  # the checkpoint of a copied step that started one of them (start_child, start_children)
    for child in finished:
        started |= Q(output_data__contains={"workflow_id": str(child)})
        started |= Q(output_data__contains={"workflow_ids": [str(child)]})
    steps = WorkflowStep.objects.using(conf.DATABASE).filter(started, status=StepStatus.COMPLETED)
    awaiting = set(steps.filter(workflow_id__in=waiting).values_list("workflow_id", flat=True))
    waiting = {pk: queue for pk, queue in waiting.items() if pk in awaiting}
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


class AwaitedCounts(NamedTuple):
    """``AWAITED_COUNTS`` of a wait's children."""

    missing: int
    unfinished: int
    unsuccessful: int

    def settled(self, wake_on_failure: bool) -> bool:
        """Whether the wait has something to act on: a child's row is gone, every
        child finished, or (``wake_on_failure``) one never will complete."""
        return bool(self.missing or not self.unfinished or (wake_on_failure and self.unsuccessful))


def _awaited_counts(array: str) -> AwaitedCounts:
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(AWAITED_COUNTS, {"ids": array})
        return AwaitedCounts(*cursor.fetchone())


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

"""Finding workflows as the admin's list finds them, for the admin and the
``workflows`` command alike: its filters and its search, each answered by an
index of ``workflows`` however many finished rows the table keeps.

- status: ``idx_workflows_status`` (status, created_at);
- type: ``idx_workflows_type_created``; queue: ``idx_workflows_queue_created``;
- why pending: the pending rows (``waits.pending_q``);
- created since: ``idx_workflows_created``; parent: ``idx_workflows_parent``;
- held by a worker: the running rows (``idx_workflows_running``);
- tag: ``workflow_tags``'s primary key (tag, created_at, workflow_id), in its order (``tagged_q``,
  ``TAGGED_NEWEST_FIRST``);
- search: the primary key (an id or its first characters), the end of an id
  (``idx_workflows_id_tail``), the type index (an exact type, or the types
  whose names contain the term, read from the registry and a loose index scan),
  the idempotency key's unique index, and, for a term that names no type, the
  error message (``idx_workflows_error_trgm``, pg_trgm: three characters or more).

Every list is newest first, which each of those indexes gives in order.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet, TextField
from django.db.models.functions import Cast, Reverse, Right
from django.db.models.lookups import StartsWith
from django.utils import timezone

from .. import worker_rows
from ..conf import conf
from ..models import TAGGED_NEWEST_FIRST, Workflow, WorkflowStatus, WorkflowTag, WorkflowWorker, tagged_q
from ..registry import registered_workflows
from ..validation import dumps_for_display
from ..waits import PendingReason, WaitKind, pending_q, pending_reason
from . import stats, step_window

#: The values of "why pending": ``waits.PendingReason`` and ``waits.WaitKind``.
PENDING_REASONS: dict[str, PendingReason | WaitKind] = {reason.value: reason for reason in (*PendingReason, *WaitKind)}


#: Hex digits at the end of an id that ``idx_workflows_id_tail`` holds: the end of
#: a UUIDv7 is random, where its start is a clock shared by runs started together.
ID_TAIL = 12
#: Hex digits of the end of an id the console shows for it.
SHORT_ID = 8
#: The shortest term searched for in error messages: pg_trgm indexes trigrams.
ERROR_SEARCH_MIN = 3
#: The index of error messages, made by migration 0011 where the server has pg_trgm.
ERROR_INDEX = "idx_workflows_error_trgm"


def short_id(workflow_id: Any) -> str:
    """The end of an id, as the console shows it (and finds it by)."""
    return str(workflow_id)[-SHORT_ID:]


class InvalidFilter(ValueError):
    """A filter's value is not one the list knows; the message says which are."""


def uuid_prefix_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids that start with ``term`` (hex digits, dashes ignored) as an
    inclusive range, which the primary key index answers directly."""
    digits = term.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(char not in "0123456789abcdef" for char in digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def search_q(term: str) -> Q:
    """An id (or its first or last characters), a type (or part of its name), an
    idempotency key, a tag, or a part of an error message; each read through an index."""
    term = term.strip()
    needle = term.lower()
    # The types whose names contain it: a type no row has and no code registers finds nothing.
    types = sorted(name for name in {*stats.workflow_types(), *registered_workflows()} if needle in name.lower())
    # A key held for ever, or with a scope: each column's index holds its keys.
    condition = Q(idempotency_key=term) | Q(scoped_key=term)
    # A tag only when some run has it (one probe of workflow_tags' key): the GIN index's arm,
    # priced by how many runs have tags at all, would otherwise turn the plan into a walk of them.
    if WorkflowTag.objects.using(conf.DATABASE).filter(tag=term).exists():
        condition |= Q(tags__contains=[term])
    if types:
        condition |= Q(workflow_type__in=types)
    ids = uuid_prefix_range(term)
    if ids is not None:
        condition |= Q(pk__gte=ids[0], pk__lte=ids[1])
        if len(needle) <= ID_TAIL and "-" not in needle:
            condition |= Q(StartsWith(Reverse(Right(Cast("id", TextField()), ID_TAIL)), needle[::-1]))
    # Error messages when it names no type (a type's runs are what "payout" asks for,
    # and an index each keeps the plan simple), only through their index: without
    # pg_trgm (migration 0011) it would read every row.
    if not types and len(term) >= ERROR_SEARCH_MIN and stats.has_index(ERROR_INDEX):
        condition |= Q(error_message__icontains=term)
    return condition


#: Candidates an ambiguous id names, at most.
CANDIDATES_SHOWN = 5


class NoSuchWorkflow(LookupError):
    """No workflow has this id, or an id that starts or ends with it."""


def resolve_id(text: str) -> uuid.UUID:
    """The workflow ``text`` names: a whole id, or the first or last characters
    of one (the 8 the console shows, say), through the primary key's index and
    ``idx_workflows_id_tail``. ``InvalidFilter`` when it is no part of an id or
    names several (the message lists them), ``NoSuchWorkflow`` when none."""
    term = str(text).strip()
    try:
        return uuid.UUID(term)
    except ValueError:
        pass
    ids = uuid_prefix_range(term)
    if ids is None:
        raise InvalidFilter(f"{term!r} is not a workflow id, nor the first or last characters of one.")
    needle = term.lower()
    condition = Q(pk__gte=ids[0], pk__lte=ids[1])
    if len(needle) <= ID_TAIL and "-" not in needle:
        condition |= Q(StartsWith(Reverse(Right(Cast("id", TextField()), ID_TAIL)), needle[::-1]))
    found = list(
        Workflow.objects.using(conf.DATABASE).filter(condition).values_list("pk", flat=True)[: CANDIDATES_SHOWN + 1]
    )
    if not found:
        raise NoSuchWorkflow(f"No workflow {term}: no id is, starts or ends with it.")
    if len(found) > 1:
        named = ", ".join(sorted(str(pk) for pk in found[:CANDIDATES_SHOWN]))
        more = " and more" if len(found) > CANDIDATES_SHOWN else ""
        raise InvalidFilter(f"{term!r} names more than one workflow: {named}{more}. Give more of the id.")
    return found[0]


def held_by_q(worker_id: str) -> Q:
    """The runs a worker holds: running, with its id."""
    return Q(status=WorkflowStatus.RUNNING, worker_id=worker_id)


def parse_uuid(value: str, what: str = "") -> uuid.UUID:
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise InvalidFilter(f"{what} {value!r} is not a workflow id (a UUID).".lstrip()) from None


@dataclass(frozen=True)
class Filters:
    """The admin list's filters and search; None: not filtered on."""

    status: str | None = None
    pending: str | None = None
    workflow_type: str | None = None
    queue: str | None = None
    created_since: datetime.datetime | None = None
    parent: str | None = None
    worker: str | None = None
    tag: str | None = None
    search: str | None = None

    def q(self) -> Q:
        """The condition, or ``InvalidFilter`` naming the value at fault and those allowed."""
        condition = Q()
        if self.status is not None:
            if self.status not in WorkflowStatus.values:
                raise InvalidFilter(f"Unknown status {self.status!r}: one of {', '.join(WorkflowStatus.values)}.")
            condition &= Q(status=self.status)
        if self.pending is not None:
            reason = PENDING_REASONS.get(self.pending)
            if reason is None:
                raise InvalidFilter(f"Unknown pending reason {self.pending!r}: one of {', '.join(PENDING_REASONS)}.")
            condition &= pending_q(reason)
        if self.workflow_type is not None:
            condition &= Q(workflow_type=self.workflow_type)
        if self.queue is not None:
            condition &= Q(queue=self.queue)
        if self.created_since is not None:
            condition &= Q(created_at__gte=self.created_since)
        if self.parent is not None:
            condition &= Q(parent_id=parse_uuid(self.parent, "Parent"))
        if self.worker is not None:
            condition &= held_by_q(self.worker)
        if self.tag is not None:
            condition &= tagged_q(self.tag)
        if self.search:
            condition &= search_q(self.search)
        return condition


def filtered(filters: Filters) -> QuerySet[Workflow]:
    """The workflows ``filters`` select, newest first."""
    order = TAGGED_NEWEST_FIRST if filters.tag is not None else ("-created_at", "-pk")
    return Workflow.objects.using(conf.DATABASE).filter(filters.q()).order_by(*order)


# -- what the workflows command shows ---------------------------------------------

#: The columns of a workflow the list shows (never the payloads, nor the traceback).
SUMMARY_FIELDS = (
    "id",
    "workflow_type",
    "status",
    "queue",
    "priority",
    "current_step",
    "attempts",
    "max_retries",
    "idempotency_key",
    "worker_id",
    "parent_id",
    "waiting_for",
    "run_after",
    "error_message",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "tags",
    "progress",
)


def summary(row: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """A workflow as the list shows it, with why it is pending (``waits.PendingReason``) when it is."""
    why = None
    if row["status"] == WorkflowStatus.PENDING:
        why = pending_reason(row["run_after"], row["waiting_for"], row["error_message"], now).value
    return {**row, "pending_reason": why}


def progress_fraction(progress: Any) -> float | None:
    """How much of a run is done, 0 to 1, where its progress has numbers
    ``done`` and ``total`` (above 0); else None (a bar cannot say it)."""
    if not isinstance(progress, dict):
        return None
    done, total = progress.get("done"), progress.get("total")
    if isinstance(done, bool) or isinstance(total, bool):
        return None
    if not isinstance(done, int | float) or not isinstance(total, int | float) or total <= 0:
        return None
    return float(min(max(done / total, 0.0), 1.0))


def progress_text(progress: Any) -> str:
    """A run's progress in a line: "40 of 100 (40%): resizing", its
    ``message`` alone, or its JSON when it has neither."""
    fraction = progress_fraction(progress)
    message = progress.get("message") if isinstance(progress, dict) else None
    said = f"{progress['done']:g} of {progress['total']:g} ({fraction:.0%})" if fraction is not None else ""
    if isinstance(message, str) and message:
        said = f"{said}: {message}" if said else message
    return said or dumps_for_display(progress)


def rows(filters: Filters, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` workflows ``filters`` select, newest first, as ``summary`` gives them."""
    now = timezone.now()
    return [summary(row, now) for row in filtered(filters).values(*SUMMARY_FIELDS)[:limit]]


def children_by_status(parent_id: uuid.UUID) -> dict[str, int]:
    """How many children a workflow has in each status, in ``WorkflowStatus``'s
    order (none: empty): one grouped query through ``idx_workflows_parent``, so
    a parent of 10,000 children costs what a parent of three does."""
    rows = Workflow.objects.using(conf.DATABASE).filter(parent_id=parent_id).order_by().values_list("status")
    counts = dict(rows.annotate(n=Count("pk")))
    return {status: counts[status] for status in WorkflowStatus.values if status in counts}


def details(workflow_id: uuid.UUID, steps: tuple[int, int | None] | None = None) -> dict[str, Any]:
    """Everything about one workflow: its columns, error history, patches, the
    run it was forked from, children by status, unconsumed events, and the
    window of its steps a page shows (``step_window.read``: with ``steps``, a
    range of them too), with its last step number and the steps left out.
    Raises ``Workflow.DoesNotExist``."""
    workflow = Workflow.objects.using(conf.DATABASE).get(pk=workflow_id)
    row = {field: getattr(workflow, field) for field in SUMMARY_FIELDS}
    window = step_window.read(workflow.pk, workflow.current_step, steps, most=None)
    waiting_events = workflow.events.filter(consumed_by_step__isnull=True).order_by("id").values_list("name", flat=True)
    return {
        **summary(row, timezone.now()),
        "deadline": workflow.deadline,
        "input_data": workflow.input_data,
        "output_data": workflow.output_data,
        "error_traceback": workflow.error_traceback,
        "error_history": workflow.error_history or [],
        "patches": workflow.patches,
        "scoped_key": workflow.scoped_key,
        "key_scope": workflow.key_scope,
        "forked_from_id": workflow.forked_from_id,
        "steps": [{field: getattr(step, field) for field in step_window.FIELDS} for step in window.steps],
        "step_count": window.last,
        "steps_not_shown": [{"first": gap.first, "last": gap.last} for gap in window.gaps],
        "children": children_by_status(workflow.pk),
        "unconsumed_events": list(waiting_events),
    }


def workers(include_gone: bool = False) -> list[dict[str, Any]]:
    """The worker processes (live and silent; gone too with ``include_gone``),
    newest first, each with the ids of the runs it holds, its abandoned step
    bodies still running (as of its last heartbeat) and its restarts."""
    now = timezone.now()
    found = WorkflowWorker.objects.using(conf.DATABASE).order_by("-started_at")
    if not include_gone:
        found = found.filter(gone_at__isnull=True)
    listed = list(found)
    held: dict[str, list[str]] = {worker.pk: [] for worker in listed}
    for workflow_id, worker_id in (
        worker_rows.held_runs(list(held)).order_by("updated_at").values_list("pk", "worker_id")
    ):
        held[str(worker_id)].append(str(workflow_id))
    return [
        {
            "id": worker.pk,
            "state": worker_rows.state_of(worker, now),
            "host": worker.host,
            "pid": worker.pid,
            "queues": worker.queues,
            "concurrency": worker.concurrency,
            "version": worker.version,
            "started_at": worker.started_at,
            "last_seen_at": worker.last_seen_at,
            "gone_at": worker.gone_at,
            "abandoned_bodies": worker.abandoned_bodies,
            "restarts": worker.restarts,
            "holds": held[worker.pk],
        }
        for worker in listed
    ]

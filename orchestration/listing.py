"""Finding workflows as the admin's list finds them, for the admin and the
``workflows`` command alike: its filters and its search, each answered by an
index of ``workflows`` however many finished rows the table keeps.

- status: ``idx_workflows_status`` (status, created_at);
- type: ``idx_workflows_type_created``; queue: ``idx_workflows_queue_created``;
- why pending: the pending rows (``waits.pending_q``);
- created since: ``idx_workflows_created``; parent: ``idx_workflows_parent``;
- held by a worker: the running rows (``idx_workflows_running``);
- search: the primary key (an id or its first characters), the type index, the
  idempotency key's unique index.

Every list is newest first, which each of those indexes gives in order.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from django.db.models import Q, QuerySet

from .conf import conf
from .models import Workflow, WorkflowStatus
from .waits import PendingReason, WaitKind, pending_q

#: The values of "why pending": ``waits.PendingReason`` and ``waits.WaitKind``.
PENDING_REASONS: dict[str, PendingReason | WaitKind] = {reason.value: reason for reason in (*PendingReason, *WaitKind)}


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
    """An exact type, an idempotency key, or an id (or its first characters)."""
    term = term.strip()
    condition = Q(workflow_type=term) | Q(idempotency_key=term)
    ids = uuid_prefix_range(term)
    if ids is not None:
        condition |= Q(pk__gte=ids[0], pk__lte=ids[1])
    return condition


def held_by_q(worker_id: str) -> Q:
    """The runs a worker holds: running, with its id."""
    return Q(status=WorkflowStatus.RUNNING, worker_id=worker_id)


def parse_uuid(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise InvalidFilter(f"{what} {value!r} is not a workflow id (a UUID).") from None


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
        if self.search:
            condition &= search_q(self.search)
        return condition


def filtered(filters: Filters) -> QuerySet[Workflow]:
    """The workflows ``filters`` select, newest first."""
    return Workflow.objects.using(conf.DATABASE).filter(filters.q()).order_by("-created_at", "-pk")

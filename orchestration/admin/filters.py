"""The list's filters beside ``status`` and ``created_at``.

Each reads its choices from an index or the registry, never from a scan of the
table, so the list stays fast on millions of rows.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from ..conf import conf
from ..models import Workflow, WorkflowStatus, WorkflowWorker, tagged_q
from ..registry import known_queues
from ..reports import stats
from ..reports.listing import held_by_q
from ..waits import PendingReason, WaitKind, pending_q

#: Beyond this many workflows in a status, the status filter says "10,000+".
STATUS_COUNT_CAP = 10_000


class StatusFilter(admin.SimpleListFilter):
    """By status, each with how many workflows are in it (counted up to
    ``STATUS_COUNT_CAP``, through the status index; over the whole table)."""

    title = "status"
    parameter_name = "status__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        counts = stats.status_counts(WorkflowStatus.values, STATUS_COUNT_CAP + 1)
        return [(status, f"{status} ({_count_label(counts.get(status, 0))})") for status in WorkflowStatus.values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(status=self.value()) if self.value() else queryset


def _count_label(count: int) -> str:
    return f"{STATUS_COUNT_CAP:,}+" if count > STATUS_COUNT_CAP else f"{count:,}"


class WorkflowTypeFilter(admin.SimpleListFilter):
    title = "type"
    parameter_name = "workflow_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The types that have runs (a loose index scan); a type with none finds nothing.
        types = set(stats.workflow_types())
        if self.value():
            types.add(str(self.value()))
        return [(name, name) for name in sorted(types)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(workflow_type=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # No scan of the table: the queues something can put work on, and
        # those the registered worker processes serve.
        queues = known_queues()
        for served in WorkflowWorker.objects.using(conf.DATABASE).values_list("queues", flat=True):
            queues.update(served or ())
        if self.value():
            queues.add(str(self.value()))
        return [(name, name) for name in sorted(queues)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class PendingFilter(admin.SimpleListFilter):
    """Pending workflows by why they are pending; the overview's queue depth splits them alike."""

    title = "pending reason"
    parameter_name = "pending"
    # A wait's kind narrows "waiting"; the values are those of waits.pending_q.
    reasons: dict[str, PendingReason | WaitKind] = {reason.value: reason for reason in (*PendingReason, *WaitKind)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (PendingReason.DUE.value, "due now"),
            (PendingReason.WAITING.value, "waiting"),
            *((kind.value, f"waiting for {kind.label}") for kind in WaitKind),
            (PendingReason.RETRYING.value, "retrying after a failure"),
            (PendingReason.SCHEDULED.value, "scheduled for later"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        reason = self.reasons.get(str(self.value()))
        return queryset.filter(pending_q(reason)) if reason is not None else queryset


class ParentFilter(admin.SimpleListFilter):
    """The children of one workflow (``?parent=<id>``, linked from its page); offered only when in use."""

    title = "parent"
    parameter_name = "parent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(str(value), f"children of {value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        if not self.value():
            return queryset
        try:
            parent_id = uuid.UUID(str(self.value()))
        except ValueError as exc:
            raise IncorrectLookupParameters(exc) from None
        return queryset.filter(parent_id=parent_id)


class WorkerFilter(admin.SimpleListFilter):
    """The runs one worker process holds (``?worker=<id>``, linked from the workers page); offered only when in use."""

    title = "held by worker"
    parameter_name = "worker"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(str(value), f"held by {value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(held_by_q(str(self.value()))) if self.value() else queryset


class TagFilter(admin.SimpleListFilter):
    """The runs started with one tag (``?tag=<tag>``, linked from a run's page;
    the search finds a tag too); offered only when in use: listing every tag
    would read every tagged row. Read newest first through ``workflow_tags`` (``tagged_q``)."""

    title = "tag"
    parameter_name = "tag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(str(value), f"tagged {value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(tagged_q(str(self.value()))) if self.value() else queryset

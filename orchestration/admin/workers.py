"""The workers page: every ``runworkers`` process, live or gone, with what it holds.

A row per process (``workflow_workers``, written by ``orchestration.worker_rows``):
its host and pid, the queues it serves, its threads, its version, the step
bodies it abandoned that still run and its restarts at ``MAX_ABANDONED_BODIES``
(one narrow column), when it started and last heartbeated, and the runs it
holds, each linked. Read only: a worker's row changes only with the process.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import worker_rows
from ..models import Workflow, WorkflowStatus, WorkflowWorker
from ..reports import charts
from .display import change_url, changelist_url, status_badge, timestamp_column
from .readonly import ReadOnlyConsole

#: Runs listed on a worker's page; the list of them all is linked.
HELD_SHOWN = 100

_BADGE = {"live": "running", "silent": "pending", "gone": "failed"}

HUNG_TITLE = "step bodies abandoned past their limit that still run, as of the last heartbeat"
RESTARTS_TITLE = "times the process restarted itself at MAX_ABANDONED_BODIES"


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("gone", "gone")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowWorker]) -> QuerySet[WorkflowWorker]:
        if self.value() == "live":
            return queryset.filter(gone_at__isnull=True)
        if self.value() == "gone":
            return queryset.filter(gone_at__isnull=False)
        return queryset


class WorkerAdmin(ReadOnlyConsole, admin.ModelAdmin):
    list_display = (
        *("id", "state", "host", "pid", "queues_label", "concurrency"),
        *("hung_and_restarts", "holds", "started", "last_seen"),
    )
    list_filter = (StateFilter,)
    search_fields = ("=id", "=host")
    fields = (
        ("id", "state"),
        ("host", "pid"),
        ("queues_label", "concurrency", "version"),
        ("hung", "restarts_label"),
        ("started", "last_seen", "gone"),
        "held",
    )
    readonly_fields = flatten_fieldsets([(None, {"fields": fields})])
    list_per_page = 100
    change_list_template = "admin/orchestration/console_change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowWorker]:
        held = (
            Workflow.objects.filter(status=WorkflowStatus.RUNNING, worker_id=OuterRef("pk"))
            .order_by()
            .values("worker_id")
            .annotate(n=Count("pk"))
            .values("n")
        )
        # Through the running rows' index, once per listed worker.
        held_count = Coalesce(Subquery(held, output_field=IntegerField()), 0)
        return super().get_queryset(request).annotate(held_count=held_count)

    started = timestamp_column("started_at", "started")
    last_seen = timestamp_column("last_seen_at", "last heartbeat")
    gone = timestamp_column("gone_at", "marked gone")

    @admin.display(description="state")
    def state(self, obj: WorkflowWorker) -> SafeString:
        now = timezone.now()
        state = worker_rows.state_of(obj, now)
        age = charts.format_duration((now - obj.last_seen_at).total_seconds())
        return format_html('{} <span class="orch-muted">seen {} ago</span>', status_badge(_BADGE[state], state), age)

    @admin.display(description="queues")
    def queues_label(self, obj: WorkflowWorker) -> str:
        return ", ".join(obj.queues) if obj.queues else "all"

    @admin.display(description="hung / restarts")
    def hung_and_restarts(self, obj: WorkflowWorker) -> SafeString:
        return format_html(
            '<span title="{}">{}</span> / <span title="{}">{}</span>',
            HUNG_TITLE,
            self.hung(obj),
            RESTARTS_TITLE,
            self.restarts_label(obj),
        )

    @admin.display(description="hung step bodies")
    def hung(self, obj: WorkflowWorker) -> SafeString:
        # Red: each holds a thread until it ends, and at MAX_ABANDONED_BODIES the process restarts.
        return _count(obj.abandoned_bodies, "orch-stale")

    @admin.display(description="restarts")
    def restarts_label(self, obj: WorkflowWorker) -> SafeString:
        return _count(obj.restarts, "")

    @admin.display(description="holds", ordering="held_count")
    def holds(self, obj: WorkflowWorker) -> SafeString | str:
        count = getattr(obj, "held_count", None)
        if count is None:
            count = worker_rows.held_counts([obj.pk]).get(obj.pk, 0)
        if not count:
            return "nothing"
        return format_html('<a href="{}">{} running</a>', changelist_url(worker=obj.pk), count)

    @admin.display(description="holds")
    def held(self, obj: WorkflowWorker) -> SafeString | str:
        runs = list(
            worker_rows.held_runs([obj.pk])
            .order_by("updated_at")
            .values_list("pk", "workflow_type", "current_step")[: HELD_SHOWN + 1]
        )
        if not runs:
            return "nothing"
        items = format_html_join(
            "",
            '<li><a href="{}">{}</a> {} at step {}</li>',
            ((change_url(pk), pk, workflow_type, step + 1) for pk, workflow_type, step in runs[:HELD_SHOWN]),
        )
        more = format_html('<p><a href="{}">All of them</a></p>', changelist_url(worker=obj.pk))
        return format_html("<ul>{}</ul>{}", items, more if len(runs) > HELD_SHOWN else "")


def _count(count: int, when_not_zero: str) -> SafeString:
    return format_html('<span class="{}">{}</span>', when_not_zero if count else "orch-muted", count)

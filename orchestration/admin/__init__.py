"""The operator's console: every workflow and step, and the repair actions.

The list stays fast on a table of millions of rows: step counts are correlated
subqueries evaluated for the page's rows only, large JSON columns are not
loaded, filters read their choices from indexes and the registry, and the
paginator estimates instead of counting past a bound.

Actions call the same functions as the Python API (``orchestration.api``), are
guarded by the model permissions ``retry_workflow`` / ``cancel_workflow``, and
are written to Django's admin log. Pages other than the list and the workflow
page (overview, step repairs, sending an event) live in ``views``.

A pending workflow shows why it is pending: waiting (for a timer, an event or
its children, until ``run_after``), retrying after a failure, scheduled for
later, or due now.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import api, charts, stats
from ..conf import conf
from ..errors import InvalidTransition
from ..models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowStatus, WorkflowStep
from ..pagination import EstimatedCountPaginator
from ..registry import registered_workflows
from ..waits import WAIT_FOREVER, PendingReason, Wait, WaitKind, pending_q, pending_reason
from . import views as admin_views

#: Longest JSON text shown on a page; the rest is cut, with a note.
JSON_DISPLAY_LIMIT = 20_000
#: Steps drawn on a workflow's timeline and listed in its inline, at most.
MAX_STEPS_SHOWN = 300


def status_badge(status: str, title: str | None = None) -> SafeString:
    return format_html('<span class="orch-badge orch-{}" title="{}">{}</span>', status, title or "", status)


def waiting_what(waiting_for: str) -> str:
    """What a workflow waits for, without a timer's "until ..." (``run_after`` says it, capped by the deadline).
    A text no wait writes (a row changed by hand) is shown as it is."""
    wait = Wait.parse(waiting_for)
    return wait.what if wait is not None else waiting_for


def waiting_until(run_after: datetime.datetime | None) -> SafeString | str:
    if run_after is None:
        return "woken: due now"
    if run_after >= WAIT_FOREVER:
        return "until woken"
    return format_html("until {}", timestamp(run_after))


def pending_label(workflow: Workflow) -> SafeString:
    """The status of a pending workflow with why it is pending, and until when."""
    reason = pending_reason(workflow.run_after, workflow.waiting_for, workflow.error_message, timezone.now())
    line = '<span class="orch-why">{}</span>'
    if reason == PendingReason.WAITING:
        assert workflow.waiting_for is not None
        return format_html(
            "{}" + line + line,
            status_badge("waiting", f"pending: waiting for {workflow.waiting_for}"),
            waiting_what(workflow.waiting_for),
            waiting_until(workflow.run_after),
        )
    if reason in (PendingReason.RETRYING, PendingReason.SCHEDULED):
        return format_html(
            "{}" + line + line,
            status_badge(workflow.status, workflow.error_message),
            reason.value,
            format_html("at {}", timestamp(workflow.run_after)),
        )
    if workflow.waiting_for:  # woken, and not claimed yet
        return format_html(
            "{}" + line, status_badge(workflow.status, workflow.error_message), f"woken: {workflow.waiting_for}"
        )
    return status_badge(workflow.status, workflow.error_message)


def pretty_json(value: Any, limit: int = JSON_DISPLAY_LIMIT) -> SafeString:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) > limit:
        return format_html(
            '<pre class="orch-json">{}</pre><p class="help">Cut at {} of {} characters.</p>',
            text[:limit],
            limit,
            len(text),
        )
    return format_html('<pre class="orch-json">{}</pre>', text)


def timestamp(value: datetime.datetime | None, *, two_lines: bool = False) -> SafeString | str:
    """A moment to the second, in the current time zone (the admin's default drops seconds)."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}">{}{}{}</time>',
        local.isoformat(),
        local.strftime("%Y-%m-%d"),
        SafeString("<br>") if two_lines else " ",
        local.strftime("%H:%M:%S"),
    )


def _timestamp_column(
    field: str, description: str, *, two_lines: bool = False
) -> Callable[[Any, Any], SafeString | str]:
    @admin.display(description=description, ordering=field)
    def show(model_admin: Any, obj: Any) -> SafeString | str:
        return timestamp(getattr(obj, field), two_lines=two_lines)

    return show


def uuid_prefix_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids that start with ``term`` (hex digits, dashes ignored) as an
    inclusive range, which the primary key index answers directly."""
    digits = term.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(char not in "0123456789abcdef" for char in digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


class WorkflowTypeFilter(admin.SimpleListFilter):
    title = "type"
    parameter_name = "workflow_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The types in the table (a loose index scan) and those the code registers.
        types = {*stats.workflow_types(), *registered_workflows()}
        if self.value():
            types.add(str(self.value()))
        return [(name, name) for name in sorted(types)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(workflow_type=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # No index covers every row's queue: offer the registered queues and
        # those that hold unfinished work (read through the status index).
        queues = {"default", *(definition.queue for definition in registered_workflows().values())}
        unfinished = Workflow.objects.filter(status__in=(WorkflowStatus.PENDING, WorkflowStatus.RUNNING))
        queues.update(unfinished.order_by().values_list("queue", flat=True).distinct())
        if self.value():
            queues.add(str(self.value()))
        return [(name, name) for name in sorted(queues)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class PendingFilter(admin.SimpleListFilter):
    """Pending workflows by why they are pending; the overview's queue depth splits them alike."""

    title = "pending, by why"
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


def _step_count(**conditions: Any) -> Coalesce:
    counted = (
        WorkflowStep.objects.filter(workflow=OuterRef("pk"), **conditions)
        .order_by()
        .values("workflow")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def _children_by_status(workflow: Workflow) -> dict[str, int]:
    """How many child workflows ``workflow`` has in each status (read once per page, through the parent index)."""
    cached: dict[str, int] | None = getattr(workflow, "_children_by_status", None)
    if cached is None:
        rows = Workflow.objects.filter(parent=workflow).order_by().values_list("status").annotate(n=Count("pk"))
        cached = {status: n for status, n in rows}
        workflow._children_by_status = cached  # type: ignore[attr-defined]
    return cached


class WorkflowChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Workflow]:
        queryset = super().get_queryset(request, exclude_parameters)
        # The list shows neither payloads nor tracebacks, which can be large.
        return queryset.defer("input_data", "output_data", "error_traceback").annotate(
            completed_steps=_step_count(status=StepStatus.COMPLETED), steps_seen=_step_count()
        )


class WorkflowStepInline(admin.TabularInline):
    model = WorkflowStep
    extra = 0
    can_delete = False
    fields = (
        "number",
        "name",
        "step_status",
        "started",
        "completed",
        "duration",
        "output",
        "error_message",
        "repair",
    )
    readonly_fields = fields
    ordering = ("step_number",)
    template = "admin/orchestration/workflow/steps_inline.html"

    # Set per request by get_formset (inline instances are made per request).
    workflow: Workflow | None = None
    can_repair = False

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        self.workflow = obj
        self.can_repair = (
            obj is not None and obj.status in api.REPAIRABLE and request.user.has_perm("orchestration.retry_workflow")
        )
        formset = super().get_formset(request, obj, **kwargs)

        class FirstStepsFormSet(formset):  # type: ignore[valid-type,misc]
            def get_queryset(self) -> Any:
                return super().get_queryset()[:MAX_STEPS_SHOWN]

        return FirstStepsFormSet

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="#")
    def number(self, step: WorkflowStep) -> int:
        return step.step_number

    @admin.display(description="name")
    def name(self, step: WorkflowStep) -> str:
        return step.step_name or "—"

    started = _timestamp_column("started_at", "started", two_lines=True)
    completed = _timestamp_column("completed_at", "completed", two_lines=True)

    @admin.display(description="status")
    def step_status(self, step: WorkflowStep) -> SafeString:
        if self._is_waiting(step):
            return status_badge("waiting", "pending: the workflow waits here")
        return status_badge(step.status)

    @admin.display(description="duration")
    def duration(self, step: WorkflowStep) -> SafeString:
        running = step.status == StepStatus.RUNNING
        text = charts.format_elapsed(step.started_at, step.completed_at, timezone.now(), running=running)
        if step.attempts > 1:  # bodies run at least once: say when one ran more
            return format_html('{}<br><span class="orch-muted">run {} times</span>', text, step.attempts)
        return format_html("{}", text)

    @admin.display(description="output")
    def output(self, step: WorkflowStep) -> SafeString | str:
        # A waiting step's output holds what it waits for, until when.
        shown = step.status == StepStatus.COMPLETED or self._is_waiting(step)
        return pretty_json(step.output_data, limit=2_000) if shown else "—"

    def _is_waiting(self, step: WorkflowStep) -> bool:
        """A wait (timer, event, children) records its step pending, with its details as output."""
        workflow = self.workflow
        return (
            step.status == StepStatus.PENDING
            and step.output_data is not None
            and workflow is not None
            and workflow.status == WorkflowStatus.PENDING
            and step.step_number == workflow.current_step + 1
        )

    @admin.display(description="repair")
    def repair(self, step: WorkflowStep) -> SafeString | str:
        workflow = self.workflow
        if not self.can_repair or workflow is None:
            return ""
        links = [
            format_html(
                '<a class="button orch-step-retry" href="{}">Retry from here</a>',
                reverse("admin:orchestration_workflow_retry_from_step", args=[workflow.pk, step.step_number]),
            )
        ]
        if step.status == StepStatus.FAILED and step.step_number == workflow.current_step + 1:
            links.append(
                format_html(
                    '<a class="button orch-step-skip" href="{}">Skip with output…</a>',
                    reverse("admin:orchestration_workflow_skip_step", args=[workflow.pk, step.step_number]),
                )
            )
        return format_html_join(" ", "{}", ((link,) for link in links))


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
        "workflow_type",
        "status_label",
        "queue",
        "progress",
        "attempts_label",
        "created",
        "heartbeat",
        "duration",
    )
    list_display_links = ("short_id",)
    list_filter = (
        "status",
        PendingFilter,
        WorkflowTypeFilter,
        QueueFilter,
        ("created_at", admin.DateFieldListFilter),
        ParentFilter,
    )
    # Replaced by get_search_results; declared so the search box shows.
    search_fields = ("=id", "=workflow_type", "=idempotency_key")
    search_help_text = "An id (or its first characters), an exact type, or an idempotency key."
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("workflow_type", "status_label"),
                    ("queue", "priority"),
                    ("attempts_label", "current_step"),
                    ("idempotency_key", "worker_id"),
                )
            },
        ),
        ("Waiting", {"fields": (("waiting_label", "waiting_until_label"),)}),
        ("Parent and children", {"fields": (("parent_link", "children_label"),)}),
        ("Error", {"fields": ("error_message",)}),
        ("Traceback", {"fields": ("traceback",), "classes": ("collapse",)}),
        ("Timeline", {"fields": ("timeline",)}),
        (
            "Timing",
            {
                "fields": (
                    ("created", "run_after_at"),
                    ("started", "finished"),
                    ("updated", "heartbeat"),
                    ("duration", "deadline_at"),
                )
            },
        ),
        ("Input and output", {"fields": ("input_json", "output_json")}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)
    #: Fieldsets shown only when the workflow has something to show in them.
    optional_fieldsets: dict[str, Callable[[Workflow], Any]] = {
        "Waiting": lambda workflow: workflow.status == WorkflowStatus.PENDING and workflow.waiting_for,
        "Parent and children": lambda workflow: workflow.parent_id or _children_by_status(workflow),
        "Error": lambda workflow: workflow.error_message,
        "Traceback": lambda workflow: workflow.error_traceback,
    }
    inlines = [WorkflowStepInline]
    actions = ["retry_workflows", "restart_workflows", "cancel_workflows", "requeue_stuck_workflows"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50

    class Media:
        css = {"all": ("orchestration/admin.css",)}

    # -- permissions: the console never edits rows; it only runs transitions.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting is retention's job (purge_workflows), which spares unfinished work.
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.retry_workflow")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.cancel_workflow")

    def has_send_event_permission(self, request: HttpRequest) -> bool:
        """Sending an event changes what a workflow does next, as a retry does: the same permission guards it."""
        return request.user.has_perm("orchestration.retry_workflow")

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        return [
            (name, options)
            for name, options in fieldsets
            if name not in self.optional_fieldsets or (obj is not None and self.optional_fieldsets[name](obj))
        ]

    # -- the list

    created = _timestamp_column("created_at", "created")
    deadline_at = _timestamp_column("deadline", "deadline")
    started = _timestamp_column("started_at", "started")
    finished = _timestamp_column("finished_at", "finished")
    updated = _timestamp_column("updated_at", "updated")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Workflow], search_term: str
    ) -> tuple[QuerySet[Workflow], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(workflow_type=term) | Q(idempotency_key=term)
        ids = uuid_prefix_range(term)
        if ids is not None:
            condition |= Q(pk__gte=ids[0], pk__lte=ids[1])
        return queryset.filter(condition), False

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Workflow) -> str:
        # Whole: ids are UUIDv7 (api.time_ordered_uuid), whose first characters
        # are a clock, the same for every workflow started in the same minute.
        return str(obj.pk)

    @admin.display(description="status", ordering="status")
    def status_label(self, obj: Workflow) -> SafeString:
        if obj.status == WorkflowStatus.PENDING:
            return pending_label(obj)
        return status_badge(obj.status, obj.error_message)

    @admin.display(description="progress")
    def progress(self, obj: Workflow) -> SafeString:
        # Annotated by WorkflowChangeList: two index lookups per listed row.
        done, seen = getattr(obj, "completed_steps"), getattr(obj, "steps_seen")  # noqa: B009
        return format_html('<span title="completed steps / steps seen">{} / {}</span>', done, seen)

    @admin.display(description="attempts", ordering="attempts")
    def attempts_label(self, obj: Workflow) -> str:
        return f"{obj.attempts} / {obj.max_retries + 1}"

    @admin.display(description="last heartbeat", ordering="updated_at")
    def heartbeat(self, obj: Workflow) -> SafeString | str:
        if obj.status != WorkflowStatus.RUNNING:
            return "—"
        age = (timezone.now() - obj.updated_at).total_seconds()
        stale = age > conf.STUCK_AFTER
        return format_html(
            '<span class="{}">{} ago</span>', "orch-stale" if stale else "orch-fresh", charts.format_duration(age)
        )

    @admin.display(description="duration")
    def duration(self, obj: Workflow) -> str:
        end = obj.finished_at if obj.status in FINISHED_STATUSES else None
        running = obj.status == WorkflowStatus.RUNNING
        return charts.format_elapsed(obj.started_at, end, timezone.now(), running=running)

    # -- the workflow page

    @admin.display(description="run after")
    def run_after_at(self, obj: Workflow) -> SafeString | str:
        if obj.run_after is not None and obj.run_after >= WAIT_FOREVER:
            return "— (until woken by an event or a child)"
        return timestamp(obj.run_after)

    @admin.display(description="waits for")
    def waiting_label(self, obj: Workflow) -> str:
        return waiting_what(obj.waiting_for) if obj.waiting_for else "—"

    @admin.display(description="until")
    def waiting_until_label(self, obj: Workflow) -> SafeString | str:
        return waiting_until(obj.run_after)

    @admin.display(description="parent")
    def parent_link(self, obj: Workflow) -> SafeString | str:
        parent = obj.parent
        if parent is None:
            return "—"
        return format_html(
            '<a href="{}">{} {}</a> {}',
            admin_views.change_url(parent.pk),
            parent.workflow_type,
            str(parent.pk),
            status_badge(parent.status),
        )

    @admin.display(description="children")
    def children_label(self, obj: Workflow) -> SafeString | str:
        counts = _children_by_status(obj)
        if not counts:
            return "—"
        links = [
            format_html(
                '<a href="{}">{} {}</a>',
                admin_views.changelist_url(parent=str(obj.pk), status__exact=status),
                counts[status],
                status,
            )
            for status in WorkflowStatus.values
            if status in counts
        ]
        return format_html(
            '<a href="{}">{} in all</a>: {}',
            admin_views.changelist_url(parent=str(obj.pk)),
            sum(counts.values()),
            format_html_join(", ", "{}", ((link,) for link in links)),
        )

    @admin.display(description="input")
    def input_json(self, obj: Workflow) -> SafeString:
        return pretty_json(obj.input_data)

    @admin.display(description="output")
    def output_json(self, obj: Workflow) -> SafeString:
        return pretty_json(obj.output_data)

    @admin.display(description="traceback")
    def traceback(self, obj: Workflow) -> SafeString | str:
        return format_html('<pre class="orch-traceback">{}</pre>', obj.error_traceback) if obj.error_traceback else "—"

    @admin.display(description="steps")
    def timeline(self, obj: Workflow) -> str:
        steps = list(
            obj.steps.order_by("step_number").values_list(
                "step_number", "step_name", "status", "started_at", "completed_at"
            )[: MAX_STEPS_SHOWN + 1]
        )
        drawn = charts.timeline([charts.StepTiming(*step) for step in steps[:MAX_STEPS_SHOWN]], timezone.now())
        return render_to_string(
            "admin/orchestration/workflow/timeline.html",
            {"timeline": drawn, "cut": len(steps) > MAX_STEPS_SHOWN, "limit": MAX_STEPS_SHOWN},
        )

    # -- extra pages

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        steps = "<path:object_id>/steps/<int:step_number>"
        return [
            path("overview/", wrap(self.overview_view), name="orchestration_workflow_overview"),
            path(f"{steps}/retry/", wrap(self.retry_from_step_view), name="orchestration_workflow_retry_from_step"),
            path(f"{steps}/skip/", wrap(self.skip_step_view), name="orchestration_workflow_skip_step"),
            path("<path:object_id>/send-event/", wrap(self.send_event_view), name="orchestration_workflow_send_event"),
            *super().get_urls(),
        ]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.overview(self, request)

    def retry_from_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return admin_views.retry_from_step(self, request, object_id, step_number)

    def skip_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return admin_views.skip_step(self, request, object_id, step_number)

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return admin_views.send_event(self, request, object_id)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context.update(admin_views.send_event_context(self, request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    # -- actions

    @admin.action(description="Retry selected workflows (keep completed steps)", permissions=["retry"])
    def retry_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.retry_workflow, "retried", "only failed or cancelled ones can be")

    @admin.action(description="Restart selected workflows from scratch", permissions=["retry"])
    def restart_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.restart_workflow, "restarted", "only finished ones can be")

    @admin.action(description="Cancel selected workflows", permissions=["cancel"])
    def cancel_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.cancel_workflow, "cancelled", "only pending or running ones can be")

    @admin.action(description="Requeue selected stuck workflows (no heartbeat)", permissions=["retry"])
    def requeue_stuck_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(
            request,
            queryset,
            api.requeue_stuck,
            "requeued",
            f"only running ones with no heartbeat for {conf.STUCK_AFTER:g} seconds can be",
        )

    def _apply(
        self,
        request: HttpRequest,
        queryset: QuerySet[Workflow],
        transition: Callable[[Any], Any],
        done: str,
        rule: str,
    ) -> None:
        changed: list[Workflow] = []
        skipped = 0
        # Each workflow goes through the API's own conditional UPDATE, so a row
        # that changed state since the page was drawn is skipped, not forced.
        for pk, workflow_type in queryset.values_list("pk", "workflow_type"):
            try:
                transition(pk)
            except (InvalidTransition, Workflow.DoesNotExist):
                skipped += 1
            else:
                changed.append(Workflow(pk=pk, workflow_type=workflow_type))
        if changed:
            LogEntry.objects.log_actions(
                user_id=request.user.pk or 0,
                queryset=changed,
                action_flag=CHANGE,
                change_message=f"{done.capitalize()} from the admin.",
            )
        text = f"{len(changed)} workflow(s) {done}; {skipped} skipped"
        if skipped:
            text += f" (in the wrong state: {rule})"
        self.message_user(request, text + ".", messages.SUCCESS if changed else messages.WARNING)

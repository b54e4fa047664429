"""The operator's console: every workflow and step, and the repair actions.

The list stays fast on a table of millions of rows: step counts are correlated
subqueries evaluated for the page's rows only, large JSON columns are not
loaded, filters read their choices from indexes and the registry, and the
paginator estimates instead of counting past a bound.

Actions call the same functions as the Python API (``orchestration.api``), are
guarded by the model permissions ``retry_workflow`` / ``cancel_workflow``, and
are written to Django's admin log. Pages other than the list and the workflow
page (overview, step repairs) live in ``admin_views``.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
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

from . import admin_views, api, charts, stats
from .conf import conf
from .errors import InvalidTransition
from .models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowStatus, WorkflowStep
from .pagination import EstimatedCountPaginator
from .registry import registered_workflows

#: Longest JSON text shown on a page; the rest is cut, with a note.
JSON_DISPLAY_LIMIT = 20_000
#: Steps drawn on a workflow's timeline and listed in its inline, at most.
MAX_STEPS_SHOWN = 300


def status_badge(status: str, title: str | None = None) -> SafeString:
    return format_html('<span class="orch-badge orch-{}" title="{}">{}</span>', status, title or "", status)


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


def _step_count(**conditions: Any) -> Coalesce:
    counted = (
        WorkflowStep.objects.filter(workflow=OuterRef("pk"), **conditions)
        .order_by()
        .values("workflow")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


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
        return pretty_json(step.output_data, limit=2_000) if step.status == StepStatus.COMPLETED else "—"

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
    list_filter = ("status", WorkflowTypeFilter, QueueFilter, ("created_at", admin.DateFieldListFilter))
    # Replaced by get_search_results; declared so the search box shows.
    search_fields = ("=id", "=workflow_type", "=idempotency_key")
    search_help_text = "An id (or its first characters, as in the list), an exact type, or an idempotency key."
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
                    "duration",
                )
            },
        ),
        ("Input and output", {"fields": ("input_json", "output_json")}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)
    #: Fieldsets shown only when the workflow has something to show in them.
    optional_fieldsets = {"Error": "error_message", "Traceback": "error_traceback"}
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

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        return [
            (name, options)
            for name, options in fieldsets
            if name not in self.optional_fieldsets or getattr(obj, self.optional_fieldsets[name], None)
        ]

    # -- the list

    created = _timestamp_column("created_at", "created")
    run_after_at = _timestamp_column("run_after", "run after")
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
        return str(obj.pk)[:8]

    @admin.display(description="status", ordering="status")
    def status_label(self, obj: Workflow) -> SafeString:
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
            *super().get_urls(),
        ]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.overview(self, request)

    def retry_from_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return admin_views.retry_from_step(self, request, object_id, step_number)

    def skip_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return admin_views.skip_step(self, request, object_id, step_number)

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

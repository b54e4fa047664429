"""The workflow admin itself: the list, the workflow page, and the URLs of the
console's own pages.

The list stays fast on a table of millions of rows: step counts are correlated
subqueries evaluated for the page's rows only, large JSON columns are not
loaded, filters read their choices from indexes and the registry, and the
paginator estimates instead of counting past a bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, ChangeList
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..conf import conf
from ..models import (
    FINISHED_STATUSES,
    TAGGED_NEWEST_FIRST,
    StepStatus,
    Workflow,
    WorkflowStatus,
    WorkflowStep,
    WorkflowTag,
)
from ..reports import charts, step_window
from ..reports.listing import children_by_status, progress_fraction, progress_text, search_q, short_id
from ..reports.pagination import EstimatedCountPaginator
from .actions import (
    cancel_workflows,
    pause_workflows,
    requeue_stuck_workflows,
    restart_workflows,
    resume_workflows,
    retry_workflows,
)
from .display import (
    ago,
    change_url,
    changelist_url,
    pending_label,
    pretty_json,
    progress_bar,
    status_badge,
    timestamp,
    timestamp_column,
    waiting_until,
    waiting_what,
    worker_link,
)
from .filters import (
    ParentFilter,
    PendingFilter,
    QueueFilter,
    StatusFilter,
    TagFilter,
    WorkerFilter,
    WorkflowTypeFilter,
)
from .fork import fork, fork_context
from .limits import time_limited
from .page import run_action, step_at_fault, summary
from .readonly import ReadOnlyConsole
from .steps import steps_context, window_of
from .views import overview, retry_from_step, send_event, send_event_context, skip_step


def _running_only(request: HttpRequest) -> bool:
    return request.GET.get("status__exact") == WorkflowStatus.RUNNING


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
    """How many child workflows ``workflow`` has in each status, read once per page."""
    cached: dict[str, int] | None = getattr(workflow, "_children_by_status", None)
    if cached is None:
        cached = children_by_status(workflow.pk)
        workflow._children_by_status = cached  # type: ignore[attr-defined]
    return cached


#: The list's sorts as a tag's rows of ``workflow_tags`` hold them (``models.TAGGED_NEWEST_FIRST``).
_TAG_ORDER = {
    "-created_at": TAGGED_NEWEST_FIRST[0],
    "-pk": TAGGED_NEWEST_FIRST[1],
    "created_at": TAGGED_NEWEST_FIRST[0][1:],
    "pk": TAGGED_NEWEST_FIRST[1][1:],
}


class WorkflowChangeList(ChangeList):
    def get_ordering_field(self, field_name: Any) -> Any:
        # A column the admin does not offer to sort on is not sorted on by a hand-made ``?o=`` either.
        if self.sortable_by is not None and field_name not in self.sortable_by:
            return None
        return super().get_ordering_field(field_name)

    def get_ordering(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> list[Any]:
        ordering = super().get_ordering(request, queryset)
        ordering = ordering if ordering != ["-pk"] else ["-created_at", "-pk"]  # asked for no sort it offers
        if request.GET.get(TagFilter.parameter_name):  # in the order of the tag's rows of workflow_tags
            ordering = [_TAG_ORDER.get(field, field) if isinstance(field, str) else field for field in ordering]
        return ordering

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Workflow]:
        queryset = super().get_queryset(request, exclude_parameters)
        # The list shows neither payloads nor tracebacks, which can be large.
        return queryset.defer("input_data", "output_data", "error_traceback", "error_history").annotate(
            completed_steps=_step_count(status=StepStatus.COMPLETED), steps_seen=_step_count()
        )


class WorkflowAdmin(ReadOnlyConsole, admin.ModelAdmin):
    """Every workflow, read only: the console changes a row only through ``orchestration.api``
    (the actions, the step repairs, sending an event), never by saving a form."""

    # Fits 1280 px: the end of the id, one line of error; a queue other than the
    # default under the type, attempts past the first under the progress.
    list_display = ("short_id", "status_label", "type_label", "progress_column", "last_error", "created", "duration")
    list_display_links = ("short_id",)
    list_filter = (
        StatusFilter,
        PendingFilter,
        WorkflowTypeFilter,
        QueueFilter,
        ("created_at", admin.DateFieldListFilter),
        ParentFilter,
        WorkerFilter,
        TagFilter,
    )
    # Replaced by get_search_results; declared so the search box shows.
    search_fields = ("=id", "=workflow_type", "=idempotency_key")
    search_help_text = (
        "An id, its first characters or its last (the 8 the list shows), a type or part of its name, "
        "an idempotency key, a tag, or else words of an error message (3 characters or more)."
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("workflow_type", "status_label"),
                    ("queue", "priority"),
                    ("attempts_label", "steps_label"),
                    ("idempotency_key", "worker"),
                    ("scoped_key", "key_scope"),
                    ("tags_label",),
                )
            },
        ),
        ("Progress", {"fields": ("progress_label",)}),
        ("Waiting", {"fields": (("waiting_label", "waiting_until_label"),)}),
        ("Parent and children", {"fields": (("parent_link", "children_label"),)}),
        ("Traceback", {"fields": ("traceback",), "classes": ("collapse",)}),
        ("Timeline", {"fields": ("timeline",)}),
        (
            "Timing",
            {
                "fields": (
                    ("created_moment", "run_after_at"),
                    ("started", "finished"),
                    ("updated", "heartbeat"),
                    ("duration", "deadline_at"),
                )
            },
        ),
        ("Input and output", {"fields": ("input_json", "output_json")}),
        ("Versions", {"fields": (("patches_label", "forked_from_link"),)}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)
    #: Fieldsets shown only when the workflow has something to show in them.
    optional_fieldsets: dict[str, Callable[[Workflow], Any]] = {
        "Progress": lambda workflow: workflow.progress is not None,
        "Waiting": lambda workflow: workflow.status == WorkflowStatus.PENDING and workflow.waiting_for,
        "Parent and children": lambda workflow: workflow.parent_id or _children_by_status(workflow),
        "Traceback": lambda workflow: workflow.error_traceback,
        "Versions": lambda workflow: workflow.patches or workflow.forked_from_id,
    }
    # Each names the has_<permission>_permission below that guards it.
    actions = [
        retry_workflows,
        restart_workflows,
        cancel_workflows,
        pause_workflows,
        resume_workflows,
        requeue_stuck_workflows,
    ]
    #: The sorts an index answers: by creation (``idx_workflows_created``, and the
    #: index of each filter, which all end in created_at), and by heartbeat among
    #: running runs (``idx_workflows_running``); see ``get_sortable_by``.
    sortable_by = ("created",)
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any) -> Any:
        paginator = super().get_paginator(request, queryset, per_page, *args, **kwargs)
        tag = request.GET.get(TagFilter.parameter_name)
        alone = set(request.GET) <= {TagFilter.parameter_name, PAGE_VAR, ORDER_VAR}
        if tag and alone and isinstance(paginator, EstimatedCountPaginator):
            # A tag alone: its runs are its rows of workflow_tags, counted from their index
            # alone, where the list's join would read each run's row (10,001 of a common tag).
            paginator.counted = WorkflowTag.objects.using(conf.DATABASE).filter(tag=tag)
        return paginator

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.retry_workflow")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.cancel_workflow")

    def has_send_event_permission(self, request: HttpRequest) -> bool:
        """Sending an event changes what a workflow does next, as a retry does: the same permission guards it."""
        return request.user.has_perm("orchestration.retry_workflow")

    def get_sortable_by(self, request: HttpRequest) -> Any:
        if _running_only(request):
            return (*self.sortable_by, "heartbeat")
        return self.sortable_by

    def get_list_display(self, request: HttpRequest) -> Any:
        # Running runs are watched by their heartbeat, the stuck first.
        if _running_only(request):
            return (*self.list_display[:-1], "heartbeat", self.list_display[-1])
        return self.list_display

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return time_limited(self, request, lambda: super(WorkflowAdmin, self).changelist_view(request, extra_context))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        return [
            (name, options)
            for name, options in fieldsets
            if name not in self.optional_fieldsets or (obj is not None and self.optional_fieldsets[name](obj))
        ]

    # -- the list

    created_moment = timestamp_column("created_at", "created")
    deadline_at = timestamp_column("deadline", "deadline")
    started = timestamp_column("started_at", "started")
    finished = timestamp_column("finished_at", "finished")
    updated = timestamp_column("updated_at", "updated")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Workflow], search_term: str
    ) -> tuple[QuerySet[Workflow], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(search_q(term)), False

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Workflow) -> SafeString:
        # The end: ids are UUIDv7 (enqueue.time_ordered_uuid), whose first characters
        # are a clock, the same for every workflow started in the same minute.
        return format_html('<span class="orch-id" title="{}">{}</span>', obj.pk, short_id(obj.pk))

    @admin.display(description="age", ordering="created_at")
    def created(self, obj: Workflow) -> SafeString | str:
        return ago(obj.created_at)

    @admin.display(description="last error")
    def last_error(self, obj: Workflow) -> SafeString | str:
        if not obj.error_message:
            return ""
        return format_html(
            '<span class="orch-error-line" title="{}">{}</span>',
            obj.error_message[:1000],
            obj.error_message.strip().splitlines()[0][:200] if obj.error_message.strip() else "",
        )

    @admin.display(description="status", ordering="status")
    def status_label(self, obj: Workflow) -> SafeString:
        if obj.status == WorkflowStatus.PENDING:
            return pending_label(obj)
        return status_badge(obj.status, obj.error_message)

    @admin.display(description="type", ordering="workflow_type")
    def type_label(self, obj: Workflow) -> SafeString:
        if obj.queue == "default":
            return format_html("{}", obj.workflow_type)
        return format_html('{}<span class="orch-why">queue {}</span>', obj.workflow_type, obj.queue)

    # Not ``progress``: the model's field of that name would be shown instead.
    @admin.display(description="progress")
    def progress_column(self, obj: Workflow) -> SafeString:
        # Annotated by WorkflowChangeList: two index lookups per listed row.
        done, seen = getattr(obj, "completed_steps"), getattr(obj, "steps_seen")  # noqa: B009
        steps = format_html('<span title="completed steps / steps seen">{} / {}</span>', done, seen)
        fraction = progress_fraction(obj.progress)
        if fraction is not None:  # what the run's code said (ctx.set_progress), as a bar
            steps = format_html("{}{}", steps, progress_bar(obj.progress, fraction))
        if obj.attempts <= 1:
            return steps
        return format_html('{}<span class="orch-why">attempt {} of {}</span>', steps, obj.attempts, obj.max_retries + 1)

    @admin.display(description="progress")
    def progress_label(self, obj: Workflow) -> SafeString | str:
        fraction = progress_fraction(obj.progress)
        said = format_html('<span class="orch-progress-text">{}</span>', progress_text(obj.progress))
        return said if fraction is None else format_html("{}{}", progress_bar(obj.progress, fraction), said)

    @admin.display(description="tags")
    def tags_label(self, obj: Workflow) -> SafeString | str:
        if not obj.tags:
            return "—"
        return format_html_join(
            " ", '<a class="orch-tag" href="{}">{}</a>', ((changelist_url(tag=t), t) for t in obj.tags)
        )

    @admin.display(description="attempts", ordering="attempts")
    def attempts_label(self, obj: Workflow) -> str:
        allowed = f"{obj.attempts} spent of {obj.max_retries + 1}"
        if obj.status == WorkflowStatus.PENDING and obj.waiting_for:
            return f"{allowed} (a wait spends none)"
        return allowed

    @admin.display(description="steps")
    def steps_label(self, obj: Workflow) -> SafeString | str:
        step = step_at_fault(obj)
        done = f"{obj.current_step} completed"
        if step is None:
            return done
        doing = {"failed": "failed at", "running": "running", "pending": "waiting at"}.get(str(step.status), "at")
        return format_html("{}; {} step {} ({})", done, doing, step.step_number, step.step_name)

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

    @admin.display(description="due at")
    def run_after_at(self, obj: Workflow) -> SafeString | str:
        # A wait's run_after is its time limit, which the waiting block says.
        if obj.status != WorkflowStatus.PENDING or obj.waiting_for:
            return "—"
        return timestamp(obj.run_after) if obj.run_after else "now"

    @admin.display(description="waits for")
    def waiting_label(self, obj: Workflow) -> str:
        return waiting_what(obj.waiting_for) if obj.waiting_for else "—"

    @admin.display(description="until")
    def waiting_until_label(self, obj: Workflow) -> SafeString | str:
        return waiting_until(obj.run_after, prefix="")

    @admin.display(description="worker")
    def worker(self, obj: Workflow) -> SafeString | str:
        # worker_id stays on a row after its run ends: only a running run is held.
        if obj.status == WorkflowStatus.RUNNING:
            return worker_link(obj.worker_id)
        if obj.worker_id:
            return format_html("none (last run by {})", worker_link(obj.worker_id))
        return "none"

    @admin.display(description="parent")
    def parent_link(self, obj: Workflow) -> SafeString | str:
        parent = obj.parent
        if parent is None:
            return "—"
        return format_html(
            '<a href="{}">{} {}</a> {}',
            change_url(parent.pk),
            parent.workflow_type,
            str(parent.pk),
            status_badge(parent.status),
        )

    @admin.display(description="patches taken")
    def patches_label(self, obj: Workflow) -> SafeString | str:
        """The ``ctx.patched`` ids whose new branch the run took, each with the step it came before."""
        if not obj.patches:
            return "—"
        taken = sorted(obj.patches.items(), key=lambda item: (item[1], item[0]))
        return format_html_join(", ", "{} (before step {})", taken)

    @admin.display(description="forked from")
    def forked_from_link(self, obj: Workflow) -> SafeString | str:
        if obj.forked_from_id is None:
            return "—"
        return format_html('<a href="{}">{}</a>', change_url(obj.forked_from_id), str(obj.forked_from_id))

    @admin.display(description="children")
    def children_label(self, obj: Workflow) -> SafeString | str:
        counts = _children_by_status(obj)
        if not counts:
            return "—"
        links = [
            format_html(
                '<a href="{}">{} {}</a>',
                changelist_url(parent=str(obj.pk), status__exact=status),
                counts[status],
                status,
            )
            for status in counts
        ]
        return format_html(
            '<a href="{}">{} in all</a>: {}',
            changelist_url(parent=str(obj.pk)),
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
        window = window_of(obj)
        steps: Sequence[charts.StepTiming]
        if window.whole:
            steps = [
                charts.StepTiming(step.step_number, step.step_name, step.status, step.started_at, step.completed_at)
                for step in window.steps
            ]
        else:  # too many to draw one by one: a bar a group of steps
            steps = step_window.spans(obj.pk, window.last)
        return render_to_string(
            "admin/orchestration/workflow/timeline.html",
            {
                "timeline": charts.timeline(steps, timezone.now()),
                "summarised": not window.whole,
                "last": f"{window.last:,}",
            },
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
            path("<path:object_id>/fork/", wrap(self.fork_view), name="orchestration_workflow_fork"),
            path(
                "<path:object_id>/run/<str:action>/",
                wrap(self.run_action_view),
                name="orchestration_workflow_run_action",
            ),
            *super().get_urls(),
        ]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        return overview(self, request)

    def retry_from_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return retry_from_step(self, request, object_id, step_number)

    def skip_step_view(self, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
        return skip_step(self, request, object_id, step_number)

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return send_event(self, request, object_id)

    def fork_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return fork(self, request, object_id)

    def run_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        return run_action(self, request, object_id, action)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context.update(send_event_context(self, request, obj))
        context.update(fork_context(self, request, obj))
        context.update(steps_context(request, obj))  # first: the head reads the step the run is at from it
        context.update(summary(self, request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

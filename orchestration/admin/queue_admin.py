"""The queues' flow control in the admin: each queue's limits beside what it is
running now, whether it is paused, and the pause and resume actions.

A row is changed only through ``orchestration.flow`` (``set_queue_limits``,
``pause_queue``, ``resume_queue``), as the Python API and the command change
it, and every worker applies it within a poll interval.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Case, Count, DurationField, IntegerField, OuterRef, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce, Now
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import flow
from ..errors import InvalidQueueLimit, UnknownQueue
from ..models import QueueStart, Workflow, WorkflowQueue, WorkflowStatus
from ..validation import QUEUE_LIMITS, RATE_PERIODS, validate_queue_limit
from .display import changelist_url, status_badge


class WorkflowQueueForm(forms.ModelForm):
    """Checks a queue's name and limits as ``set_queue_limits`` does, before anything is saved."""

    class Meta:
        model = WorkflowQueue
        fields = ["name", "paused", *QUEUE_LIMITS]
        help_texts = {
            "concurrency": "Runs of this queue running at once, across every worker. Empty: no limit.",
            "key_concurrency": "Runs of one concurrency key running at once. Empty: no limit.",
            "rate_limit": 'Claims in any window of a period: "100/m", "10/s", "1000/h". Empty: no limit.',
            "key_rate_limit": "The same, for each concurrency key. Empty: no limit.",
            "paused": "Pending runs are not claimed; running ones finish.",
        }

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if self.instance._state.adding:
            try:
                flow.check_queue(name)
            except UnknownQueue as exc:
                raise forms.ValidationError(str(exc)) from None
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for limit in QUEUE_LIMITS:
            if limit in cleaned:
                try:
                    validate_queue_limit(limit, cleaned[limit] if cleaned[limit] != "" else None)
                except InvalidQueueLimit as exc:
                    # In the form's terms: an empty field, not None, lifts a limit.
                    self.add_error(limit, str(exc).replace(" (or None for no limit)", "; empty: no limit"))
        return cleaned


@admin.action(description="Pause the selected queues", permissions=["change"])
def pause_queues(model_admin: admin.ModelAdmin[WorkflowQueue], request: HttpRequest, queryset: QuerySet[Any]) -> None:
    _each(model_admin, request, queryset, flow.pause_queue, "Paused: {}. Running work finishes.", "Paused")


@admin.action(description="Resume the selected queues", permissions=["change"])
def resume_queues(model_admin: admin.ModelAdmin[WorkflowQueue], request: HttpRequest, queryset: QuerySet[Any]) -> None:
    _each(model_admin, request, queryset, flow.resume_queue, "Resumed: {}.", "Resumed")


def _each(
    model_admin: admin.ModelAdmin[WorkflowQueue],
    request: HttpRequest,
    queryset: QuerySet[Any],
    change: Callable[[str], Any],
    done: str,
    logged: str,
) -> None:
    queues = list(queryset.only("pk", "name"))
    for queue in queues:
        change(queue.name)
    if queues:  # the admin's history of each queue, as its change form and the workflows' actions keep
        user = request.user.pk or 0
        message = f"{logged} from the admin."
        LogEntry.objects.log_actions(user_id=user, queryset=queues, action_flag=CHANGE, change_message=message)
    model_admin.message_user(request, done.format(", ".join(queue.name for queue in queues)), messages.SUCCESS)


class WorkflowQueueAdmin(admin.ModelAdmin):
    """Each queue's rules and what it runs now; saving goes through ``orchestration.flow``."""

    form = WorkflowQueueForm
    list_display = (
        *("name", "state", "pending_label", "running_label"),
        *("key_concurrency", "rate_label", "key_rate_limit", "source"),
    )
    actions = [pause_queues, resume_queues]
    search_fields = ("name",)
    change_list_template = "admin/orchestration/console_change_list.html"

    class Media:
        css = {"all": ("orchestration/admin.css",)}
        js = ("orchestration/live.js",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowQueue]:
        running, pending = (
            Workflow.objects.filter(queue=OuterRef("name"), status=status)
            .order_by()
            .values("queue")
            .annotate(n=Count("pk"))
            .values("n")
            for status in (WorkflowStatus.RUNNING, WorkflowStatus.PENDING)
        )
        # The claims of each rate-limited queue in its window, as flow.started_in_window counts them,
        # in the page's one query: through idx_queue_starts, once per listed queue.
        window = Case(
            *(
                When(rate_limit__endswith=f"/{unit}", then=Value(datetime.timedelta(seconds=seconds)))
                for unit, seconds in RATE_PERIODS.items()
            ),
            output_field=DurationField(),
        )
        started = (
            QueueStart.objects.filter(queue=OuterRef("name"), started_at__gt=Now() - OuterRef("rate_window"))
            .order_by()
            .values("queue")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(running=Coalesce(Subquery(running, IntegerField()), 0), rate_window=window)
            .annotate(pending=Coalesce(Subquery(pending, IntegerField()), 0))
            .annotate(started=Coalesce(Subquery(started, IntegerField()), 0))
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # Every queue is listed, with its actions: one that only runs or code name gets a row that limits nothing.
        flow.add_rows_of_listed_queues()
        return super().changelist_view(request, extra_context)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("name",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: WorkflowQueue, form: Any, change: bool) -> None:
        limits = {limit: form.cleaned_data[limit] or None for limit in QUEUE_LIMITS if limit in form.changed_data}
        if limits or not change:
            flow.set_queue_limits(obj.name, **limits)
        if "paused" in form.changed_data or (not change and obj.paused):
            (flow.pause_queue if obj.paused else flow.resume_queue)(obj.name)
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: WorkflowQueue) -> None:
        super().delete_model(request, obj)
        flow.sync_settings()  # a queue of the settings gets their limits back at once

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowQueue]) -> None:
        super().delete_queryset(request, queryset)
        flow.sync_settings()

    @admin.display(description="state", ordering="paused")
    def state(self, obj: WorkflowQueue) -> SafeString:
        return status_badge("paused" if obj.paused else "active")

    @admin.display(description="pending")
    def pending_label(self, obj: WorkflowQueue) -> SafeString:
        url = changelist_url(queue=obj.name, status__exact="pending")
        return format_html('<a href="{}">{}</a>', url, getattr(obj, "pending", 0))

    @admin.display(description="running / concurrency")
    def running_label(self, obj: WorkflowQueue) -> SafeString:
        running = getattr(obj, "running", 0)
        limit = obj.concurrency if obj.concurrency is not None else "no limit"
        url = changelist_url(queue=obj.name, status__exact="running")
        return format_html('<a href="{}">{}</a> / {}', url, running, limit)

    @admin.display(description="started in the window / rate limit")
    def rate_label(self, obj: WorkflowQueue) -> str:
        if obj.rate_limit is None:
            return "no limit"
        started = getattr(obj, "started", None)
        if started is None:  # a row not read through get_queryset
            started = flow.started_in_window(obj.name, obj.rate_limit)
        return f"{started} / {obj.rate_limit}"

    @admin.display(description="limits from", boolean=False)
    def source(self, obj: WorkflowQueue) -> str:
        return "ORCHESTRATION['QUEUES']" if obj.limits_from_settings else "an operator"

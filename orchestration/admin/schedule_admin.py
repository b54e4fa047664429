"""The schedules in the admin: made, changed, paused and resumed by an operator,
each with its next tick and its last run; "Run now" and "Backfill" on its page.

A row is changed only through ``orchestration.schedules.api``, as user code
changes it, so the form's errors are that API's (a bad expression, an unknown
type or time zone, an input the workflow refuses) and nothing is saved with
one. A schedule of the code (``@workflow(schedule=...)``) shows its expression
read-only: only pausing and resuming it is the operator's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.admin.widgets import AdminSplitDateTime
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import moments
from ..errors import InvalidSchedule, InvalidWorkflowInput, UnknownWorkflowType
from ..models import ScheduleTick, WorkflowSchedule
from ..registry import get_workflow, registered_workflows
from ..schedules import api
from ..schedules.cron import check_expression, next_tick, zone
from ..schedules.scheduler import MISSED_TICKS_LIMIT, runs_here, sync_code_schedules
from .display import change_url, status_badge, timestamp

#: The fields an operator sets; a schedule of the code has only ``enabled`` of them.
FIELDS = ["name", "workflow_type", "cron", "timezone", "input", "missed_ticks", "enabled"]


class WorkflowScheduleForm(forms.ModelForm):
    """Checks each field as ``orchestration.schedule`` does, before anything is saved."""

    class Meta:
        model = WorkflowSchedule
        fields = FIELDS
        help_texts = {
            "cron": "Five fields, or six with seconds last: '*/5 * * * *', '30 2 * * *', '* * * * * */10'.",
            "timezone": "The IANA time zone the expression is read in: 'UTC', 'Europe/Berlin'.",
            "input": "Each run's input, as JSON, checked against the workflow's input=. Empty: "
            '{"scheduled_for": "<the tick>"}.',
            "missed_ticks": "Of the ticks that passed while no worker ran: start the latest only, "
            f"or each of them (at most {MISSED_TICKS_LIMIT}, the latest).",
            "enabled": "Unticked: paused. Resumed, it starts from the first tick after now.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "workflow_type" in self.fields:
            types = sorted(registered_workflows())
            self.fields["workflow_type"].widget = forms.Select(
                choices=[("", "---------"), *((name, name) for name in types)]
            )

    def _checked(self, field: str, check: Callable[[Any], Any]) -> Any:
        value = self.cleaned_data[field]
        try:
            check(value)
        except (InvalidSchedule, UnknownWorkflowType) as exc:
            raise forms.ValidationError(str(exc)) from None
        return value

    def clean_name(self) -> str:
        return self._checked("name", api.check_name)

    def clean_workflow_type(self) -> str:
        return self._checked("workflow_type", get_workflow)

    def clean_cron(self) -> str:
        return self._checked("cron", check_expression)

    def clean_timezone(self) -> str:
        return self._checked("timezone", zone)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance.from_code or self.errors:
            return cleaned
        try:
            api.check_schedule(
                cleaned.get("name", self.instance.name),
                cleaned["workflow_type"],
                cleaned["cron"],
                input=cleaned.get("input"),
                timezone=cleaned["timezone"],
                missed_ticks=cleaned["missed_ticks"],
            )
        except InvalidWorkflowInput as exc:
            self.add_error("input", str(exc))
        except (InvalidSchedule, UnknownWorkflowType) as exc:
            self.add_error(None, str(exc))
        return cleaned


class BackfillForm(forms.Form):
    start = forms.SplitDateTimeField(widget=AdminSplitDateTime, help_text="The first moment, in your time zone.")
    end = forms.SplitDateTimeField(widget=AdminSplitDateTime, help_text="The last moment; not in the future.")


def _each(
    model_admin: admin.ModelAdmin[WorkflowSchedule],
    request: HttpRequest,
    queryset: QuerySet[Any],
    change: Callable[[str], Any],
    done: str,
) -> None:
    schedules = list(queryset.only("pk", "name"))
    for row in schedules:
        change(row.name)
    if schedules:  # each schedule's history, as its change form keeps it
        message = f"{done.split(':')[0]} from the admin."
        LogEntry.objects.log_actions(
            user_id=request.user.pk or 0, queryset=schedules, action_flag=CHANGE, change_message=message
        )
    model_admin.message_user(request, done.format(", ".join(row.name for row in schedules)), messages.SUCCESS)


@admin.action(description="Pause the selected schedules", permissions=["change"])
def pause_schedules(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    _each(model_admin, request, queryset, api.pause_schedule, "Paused: {}. Runs already started go on.")


@admin.action(description="Resume the selected schedules", permissions=["change"])
def resume_schedules(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    _each(model_admin, request, queryset, api.resume_schedule, "Resumed: {}, from their next tick.")


@admin.action(description="Run the selected schedules now", permissions=["change"])
def run_schedules_now(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    _each(model_admin, request, queryset, api.run_now, "Started a run now: {}.")


class WorkflowScheduleAdmin(admin.ModelAdmin):
    """Schedules with their next tick and last run; saving goes through ``orchestration.schedules.api``."""

    form = WorkflowScheduleForm
    list_display = ("name", "state", "workflow_type", "cron", "timezone", "next_tick", "last_run", "source")
    list_filter = ("enabled", "from_code")
    actions = [pause_schedules, resume_schedules, run_schedules_now]
    search_fields = ("name", "workflow_type")
    change_form_template = "admin/orchestration/workflowschedule/change_form.html"
    change_list_template = "admin/orchestration/console_change_list.html"

    class Media:
        css = {"all": ("orchestration/admin.css",)}
        js = ("orchestration/live.js",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowSchedule]:
        last = ScheduleTick.objects.filter(name=OuterRef("name"))
        return (
            super()
            .get_queryset(request)
            .annotate(last_run_id=Subquery(last.values("workflow_id")[:1]))
            .annotate(last_started_at=Subquery(last.values("started_at")[:1]))
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        sync_code_schedules()  # the code's schedules are listed before any worker started
        return super().changelist_view(request, extra_context)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = ["next_tick", "last_run", "source"] if obj is not None else []
        return [*FIELDS, *shown]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()
        if obj.from_code:  # the expression is the code's: a deploy changes it
            return [field for field in self.get_fields(request, obj) if field != "enabled"]
        return ("name", "next_tick", "last_run", "source")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A schedule the code declares would come back at once: remove it from the code.
        declared = obj is not None and obj.from_code and runs_here(obj.workflow_type, True)
        return not declared and super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: WorkflowSchedule, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if obj.from_code:
            (api.resume_schedule if data["enabled"] else api.pause_schedule)(obj.name)
        else:
            fields = {name: data[name] for name in ("input", "timezone", "enabled", "missed_ticks")}
            api.schedule(data.get("name", obj.name), data["workflow_type"], data["cron"], **fields)
        obj.pk = api.get_schedule(data.get("name", obj.name)).pk
        obj.refresh_from_db()

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/run-now/", wrap(self.run_now_view), name="orchestration_workflowschedule_run_now"),
            path(
                "<path:object_id>/backfill/", wrap(self.backfill_view), name="orchestration_workflowschedule_backfill"
            ),
            *super().get_urls(),
        ]

    def _to_change(self, request: HttpRequest, object_id: str) -> WorkflowSchedule:
        from django.core.exceptions import PermissionDenied
        from django.http import Http404

        row = self.get_object(request, object_id)
        if row is None:
            raise Http404(f"No schedule {object_id}.")
        if not self.has_change_permission(request, row):
            raise PermissionDenied
        return row

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        row = self._to_change(request, object_id)
        back = reverse("admin:orchestration_workflowschedule_change", args=[quote(row.pk)])
        if request.method != "POST":
            return HttpResponseRedirect(back)
        try:
            run = api.run_now(row.name)
        except (InvalidWorkflowInput, UnknownWorkflowType) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(back)
        self.log_change(request, row, f"Run now: workflow {run.pk}.")
        message = format_html('Schedule {} started <a href="{}">{}</a>.', row.name, change_url(run.pk), run.pk)
        self.message_user(request, message, messages.SUCCESS)
        return HttpResponseRedirect(back)

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        row = self._to_change(request, object_id)
        form = BackfillForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                runs, existing = api.backfill(row.name, form.cleaned_data["start"], form.cleaned_data["end"])
            except (InvalidSchedule, InvalidWorkflowInput, UnknownWorkflowType) as exc:
                form.add_error(None, str(exc))
            else:
                done = f"Backfilled {row.name}: {len(runs)} run(s) started, {existing} tick(s) already had one."
                self.log_change(request, row, done)
                self.message_user(request, done, messages.SUCCESS)
                return HttpResponseRedirect(
                    reverse("admin:orchestration_workflowschedule_change", args=[quote(row.pk)])
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": row,
            "title": f"Backfill {row.name}",
            "form": form,
            "media": self.media + form.media,
            "limit": api.BACKFILL_LIMIT,
        }
        return TemplateResponse(request, "admin/orchestration/workflowschedule/backfill.html", context)

    @admin.display(description="state", ordering="enabled")
    def state(self, obj: WorkflowSchedule) -> SafeString:
        return status_badge("active" if obj.enabled else "paused")

    @admin.display(description="next tick")
    def next_tick(self, obj: WorkflowSchedule) -> SafeString | str:
        if not obj.enabled:
            return "— (paused)"
        try:
            return timestamp(next_tick(obj.cron, zone(obj.timezone), moments.local(timezone.now())))
        except InvalidSchedule as exc:  # a row written by SQL
            return str(exc)

    @admin.display(description="last run")
    def last_run(self, obj: WorkflowSchedule) -> SafeString | str:
        run = getattr(obj, "last_run_id", None)
        if run is None:
            return "—"
        started = getattr(obj, "last_started_at", None)
        return format_html('<a href="{}">{}</a> {}', change_url(run), str(run)[-8:], timestamp(started))

    @admin.display(description="from", ordering="from_code")
    def source(self, obj: WorkflowSchedule) -> str:
        if not obj.from_code:
            return "an operator"
        declared = runs_here(obj.workflow_type, True)
        return "the code (@workflow)" if declared else "the code, no longer declared here"

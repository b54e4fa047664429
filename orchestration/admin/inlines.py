"""A workflow's steps, listed under its page, with the repairs a failed or
cancelled workflow offers on each (retry from here, skip with an output)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import transitions
from ..models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from ..reports import charts
from .display import MAX_STEPS_SHOWN, pretty_json, status_badge, timestamp_column


class WorkflowStepInline(admin.TabularInline):
    model = WorkflowStep
    extra = 0
    can_delete = False
    # The repairs beside the status, where a narrow page still shows them.
    fields = (
        "number",
        "name",
        "step_status",
        "repair",
        "started",
        "completed",
        "duration",
        "output",
        "error_message",
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
            obj is not None
            and obj.status in transitions.REPAIRABLE
            and request.user.has_perm("orchestration.retry_workflow")
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

    started = timestamp_column("started_at", "started", two_lines=True)
    completed = timestamp_column("completed_at", "completed", two_lines=True)

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

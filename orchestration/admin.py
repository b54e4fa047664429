"""The operator's console: every workflow and step, and the repair actions.

Actions call the same functions as the Python API (``orchestration.api``), are
guarded by the model permissions ``retry_workflow`` / ``cancel_workflow``, and
are written to Django's admin log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest

from . import api
from .errors import InvalidTransition
from .models import Workflow, WorkflowStep


class WorkflowStepInline(admin.TabularInline):
    model = WorkflowStep
    extra = 0
    can_delete = False
    fields = (
        "step_number",
        "step_name",
        "status",
        "started_at",
        "completed_at",
        "attempts",
        "output_data",
        "error_message",
    )
    readonly_fields = fields
    ordering = ("step_number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
        "workflow_type",
        "status",
        "queue",
        "current_step",
        "attempts",
        "created_at",
        "updated_at",
    )
    list_filter = ("status", "workflow_type", "queue", "created_at")
    search_fields = ("=id", "workflow_type", "=idempotency_key")
    readonly_fields = [field.name for field in Workflow._meta.fields]
    inlines = [WorkflowStepInline]
    actions = ["retry_workflows", "restart_workflows", "cancel_workflows"]
    show_full_result_count = False
    list_per_page = 50

    @admin.display(description="id")
    def short_id(self, obj: Workflow) -> str:
        return str(obj.pk)[:8]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.retry_workflow")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orchestration.cancel_workflow")

    @admin.action(description="Retry selected workflows (keep completed steps)", permissions=["retry"])
    def retry_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.retry_workflow, "retried")

    @admin.action(description="Restart selected workflows from scratch", permissions=["retry"])
    def restart_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.restart_workflow, "restarted")

    @admin.action(description="Cancel selected workflows", permissions=["cancel"])
    def cancel_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._apply(request, queryset, api.cancel_workflow, "cancelled")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Workflow], transition: Callable[[Any], Any], done: str
    ) -> None:
        changed: list[Workflow] = []
        skipped = 0
        for workflow in queryset.only("pk", "workflow_type"):
            try:
                transition(workflow.pk)
            except (InvalidTransition, Workflow.DoesNotExist):
                skipped += 1
            else:
                changed.append(workflow)
        if changed:
            LogEntry.objects.log_actions(
                user_id=request.user.pk or 0,
                queryset=changed,
                action_flag=CHANGE,
                change_message=f"{done.capitalize()} from the admin.",
            )
        level = messages.SUCCESS if changed else messages.WARNING
        self.message_user(
            request, f"{len(changed)} workflow(s) {done}; {skipped} skipped (not in a state that allows it).", level
        )

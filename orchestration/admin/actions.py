"""The list's bulk actions: retry, restart, cancel, pause, resume, requeue the stuck.

Each calls the same function as the Python API (``orchestration.api``), so a
status changes in one place; each is guarded by a model permission (the admin's
``has_retry_permission`` / ``has_cancel_permission``) and written to Django's
admin log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from .. import api
from ..conf import conf
from ..errors import InvalidTransition
from ..models import Workflow
from ..reports.listing import short_id
from ..transitions import MOVES, children_to_stop
from .display import change_url
from .page import children_stopped


@admin.action(description="Retry selected workflows (keep completed steps)", permissions=["retry"])
def retry_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> None:
    _apply(model_admin, request, queryset, api.retry_workflow, "retried", "only failed or cancelled ones can be")


@admin.action(description="Restart selected workflows from scratch", permissions=["retry"])
def restart_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> None:
    _apply(model_admin, request, queryset, api.restart_workflow, "restarted", "only finished ones can be")


@admin.action(description="Cancel selected workflows", permissions=["cancel"])
def cancel_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> TemplateResponse | None:
    """Asks first, saying how many workflows it cancels and how many of their
    children it stops with them; then cancels each through the API."""
    if request.POST.get("confirmed") != "yes":
        return _confirm_cancel(model_admin, request, queryset)
    _apply(
        model_admin, request, queryset, api.cancel_workflow, "cancelled", "only pending, running or paused ones can be"
    )
    return None


@admin.action(description="Pause selected workflows (running ones at their next step boundary)", permissions=["cancel"])
def pause_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> None:
    _apply(model_admin, request, queryset, api.pause_workflow, "paused", "only pending or running ones can be")


@admin.action(description="Resume selected paused workflows", permissions=["cancel"])
def resume_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> None:
    _apply(model_admin, request, queryset, api.resume_workflow, "resumed", "only paused ones can be")


#: Workflows whose children the cancel's confirmation counts; past it, it says so without a number.
CHILDREN_COUNTED_FOR = 10_000


def _confirm_cancel(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> TemplateResponse:
    # Posted back as they came: the ids ticked, and "select all" across pages (the
    # list's filters, in the page's address, select the same rows again).
    across = request.POST.get("select_across") == "1"
    ids = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    cancellable = queryset.filter(status__in=MOVES["cancel"].sources)
    roots = list(cancellable.values_list("pk", flat=True)[: CHILDREN_COUNTED_FOR + 1])
    counted = len(roots) <= CHILDREN_COUNTED_FOR
    selected = queryset.count() if across else len(ids)
    to_cancel = len(roots) if counted else cancellable.count()
    return TemplateResponse(
        request,
        "admin/orchestration/workflow/cancel_confirmation.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "Cancel workflows",
            "ids": ids,
            "checkbox": helpers.ACTION_CHECKBOX_NAME,
            "select_across": "1" if across else "0",
            "selected": selected,
            "cancellable": to_cancel,
            "skipped": selected - to_cancel,
            "children_stopped": children_stopped(children_to_stop(roots) if counted else None),
            "back": request.get_full_path(),
        },
    )


@admin.action(description="Requeue selected stuck workflows (no heartbeat)", permissions=["retry"])
def requeue_stuck_workflows(
    model_admin: admin.ModelAdmin[Workflow], request: HttpRequest, queryset: QuerySet[Workflow]
) -> None:
    _apply(
        model_admin,
        request,
        queryset,
        api.requeue_stuck,
        "requeued",
        f"only running ones with no heartbeat for {conf.STUCK_AFTER:g} seconds can be",
    )


def _apply(
    model_admin: admin.ModelAdmin[Workflow],
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
    # The filter the operator acted from may no longer show them: link to where they are now.
    message = format_html("{}.", text)
    if changed:
        runs = format_html_join(", ", '<a href="{}">{}</a>', ((change_url(w.pk), short_id(w.pk)) for w in changed[:10]))
        more = " (the first 10)" if len(changed) > 10 else ""
        message = format_html("{} Open {}{}.", message, runs, more)
    model_admin.message_user(request, message, messages.SUCCESS if changed else messages.WARNING)

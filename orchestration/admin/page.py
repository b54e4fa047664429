"""A run's page leads with what an operator does: its state, why it is in it
(its error, what it waits for), the repairs it allows, and the errors of its
earlier attempts.

``summary`` is what the page's head draws; ``run_action`` the POST behind its
Retry / Restart / Cancel / Pause / Resume buttons, each guarded by the permission that guards
the list's action of the same name, and made through ``orchestration.api``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import api, transitions
from ..errors import InvalidTransition
from ..models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from ..reports import charts
from ..transitions import MOVES
from ..waits import PendingReason, pending_reason
from .display import ago, change_url, status_badge, timestamp, waiting_until, waiting_what, worker_link
from .steps import window_of
from .views import WorkflowConsole


@dataclass(frozen=True)
class RunAction:
    name: str
    label: str
    sources: tuple[str, ...]
    permission: str  # the ModelAdmin's has_<permission>_permission
    call: Callable[[Any], Any]
    done: str
    confirm: str = ""


_RETRIED = "is pending again; it resumes after its last completed step"
_RESTARTED = "is pending again; it runs from its first step"
_DISCARD = "Discard every step's checkpoint and run it again from step 1?"
_PAUSED = "is paused: no worker claims it, and a running run stops at its next step boundary"
_RESUMED = "is resumed; it goes on after its last completed step"
RUN_ACTIONS = (
    RunAction("retry", "Retry", ("failed", "cancelled"), "retry", api.retry_workflow, _RETRIED),
    RunAction("restart", "Restart from scratch", ("failed", "cancelled", "completed"), "retry", api.restart_workflow,
              _RESTARTED, _DISCARD),
    RunAction("cancel", "Cancel", MOVES["cancel"].sources, "cancel", api.cancel_workflow, "is cancelled"),
    # Pausing stops a run as a cancel does, but for a while: the same permission guards it.
    RunAction("pause", "Pause", MOVES["pause"].sources, "cancel", api.pause_workflow, _PAUSED),
    RunAction("resume", "Resume", MOVES["resume"].sources, "cancel", api.resume_workflow, _RESUMED),
)  # fmt: skip


def _allowed(model_admin: WorkflowConsole, request: HttpRequest, action: RunAction) -> bool:
    return bool(getattr(model_admin, f"has_{action.permission}_permission")(request))


def step_at_fault(workflow: Workflow) -> WorkflowStep | None:
    """The step after the last completed one, if it was recorded: where a run failed, waits or runs."""
    return window_of(workflow).at_fault


def headline(workflow: Workflow, step: WorkflowStep | None) -> SafeString | str:
    """One line saying where the run is, and why."""
    now = timezone.now()
    at_step = format_html(" at step {} ({})", step.step_number, step.step_name) if step else ""
    if workflow.status == WorkflowStatus.FAILED:
        failed = step is not None and step.status == StepStatus.FAILED
        return format_html(
            "Failed{} after {} attempt(s), {}.", at_step if failed else "", workflow.attempts, ago(workflow.finished_at)
        )
    if workflow.status == WorkflowStatus.CANCELLED:
        return format_html("Cancelled{}, {}.", at_step, ago(workflow.finished_at))
    if workflow.status == WorkflowStatus.COMPLETED:
        took = charts.format_elapsed(workflow.started_at, workflow.finished_at, now, running=False)
        return format_html("Completed {} steps in {}, {}.", workflow.current_step, took, ago(workflow.finished_at))
    if workflow.status == WorkflowStatus.PAUSED:
        if workflow.lease_token is not None:  # not given back yet
            return format_html(
                "Pausing{}: {} gives it back at its next step boundary.", at_step, worker_link(workflow.worker_id)
            )
        return format_html("Paused{}; no worker claims it until it is resumed.", at_step)
    if workflow.status == WorkflowStatus.RUNNING:
        return format_html(
            "Running{} on {}; last heartbeat {}.", at_step, worker_link(workflow.worker_id), ago(workflow.updated_at)
        )
    reason = pending_reason(workflow.run_after, workflow.waiting_for, workflow.error_message, now)
    if reason == PendingReason.WAITING:
        assert workflow.waiting_for is not None
        return format_html(
            "Waiting{} for {}, {}; it holds no worker meanwhile.",
            at_step,
            waiting_what(workflow.waiting_for),
            waiting_until(workflow.run_after),
        )
    if reason == PendingReason.RETRYING:
        return format_html(
            "Retrying at {}: attempt {} of {} failed.",
            timestamp(workflow.run_after),
            workflow.attempts,
            workflow.max_retries + 1,
        )
    if reason == PendingReason.SCHEDULED:
        return format_html("Scheduled for {}.", timestamp(workflow.run_after))
    return "Due now: the next free worker takes it."


def history(workflow: Workflow) -> list[dict[str, Any]]:
    """The errors of its attempts, newest first, their moments parsed."""
    entries = []
    for entry in workflow.error_history or []:
        at = entry.get("at")
        moment = datetime.datetime.fromisoformat(at) if isinstance(at, str) else None
        entries.append({**entry, "when": timestamp(moment) if moment else "—"})
    return entries


def summary(model_admin: WorkflowConsole, request: HttpRequest, workflow: Workflow | None) -> dict[str, Any]:
    """What the head of a run's page draws."""
    if workflow is None:
        return {}
    step = step_at_fault(workflow)
    now = timezone.now()
    waiting = pending_reason(workflow.run_after, workflow.waiting_for, workflow.error_message, now)
    badge = "waiting" if workflow.status == WorkflowStatus.PENDING and waiting == PendingReason.WAITING else None
    buttons = [
        {
            "name": action.name,
            "label": action.label,
            "confirm": cancel_confirmation(workflow) if action.name == "cancel" else action.confirm,
            "url": reverse("admin:orchestration_workflow_run_action", args=[quote(workflow.pk), action.name]),
        }
        for action in RUN_ACTIONS
        if workflow.status in action.sources and _allowed(model_admin, request, action)
    ]
    return {
        "summary": {
            "badge": status_badge(badge or workflow.status),
            "headline": headline(workflow, step),
            "error": workflow.error_message if workflow.status != WorkflowStatus.COMPLETED else None,
            "buttons": buttons,
            "history": history(workflow),
        }
    }


def cancel_confirmation(workflow: Workflow) -> str:
    """What the Cancel button asks: how many runs the cancel stops besides this one."""
    stopped = transitions.children_to_stop([workflow.pk])
    return f"Cancel this workflow?{children_stopped(stopped)}"


def children_stopped(count: int | None) -> str:
    """How a cancel's confirmation says the children it stops (0: nothing; None: not counted)."""
    if count == 0:
        return ""
    if count is None:
        children = "their unfinished child workflows"
    else:
        children = "1 unfinished child workflow" if count == 1 else f"{count} unfinished child workflows"
    return f" It also stops {children} (their children and theirs); detached children keep running."


def run_action(model_admin: WorkflowConsole, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
    """Retry, restart, cancel, pause or resume one run from its page (POST), then back to it with what happened."""
    action = next((action for action in RUN_ACTIONS if action.name == name), None)
    if action is None:
        raise Http404(f"No action {name!r}.")
    if not (model_admin.has_view_permission(request) and _allowed(model_admin, request, action)):
        raise PermissionDenied
    workflow = model_admin.get_object(request, unquote(object_id))
    if workflow is None:
        raise Http404(f"No workflow {object_id}.")
    if request.method == "POST":
        try:
            action.call(workflow.pk)
        except (InvalidTransition, Workflow.DoesNotExist) as exc:
            model_admin.message_user(request, str(exc), messages.ERROR)
        else:
            model_admin.log_change(request, workflow, f"{action.label} from its page.")
            model_admin.message_user(request, f"Workflow {workflow.pk} {action.done}.", messages.SUCCESS)
    return HttpResponseRedirect(change_url(workflow.pk))

"""Forking a finished run from its page: a new run from one of its steps
(``orchestration.forks.fork_workflow``), guarded by the retry permission."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from ..errors import InvalidWorkflowInput, UnknownWorkflowType
from ..forks import fork_workflow
from ..models import FINISHED_STATUSES, Workflow
from .display import change_url
from .views import WorkflowConsole, workflow_to_change


def fork_context(model_admin: WorkflowConsole, request: HttpRequest, workflow: Workflow | None) -> dict[str, Any]:
    """What the workflow page needs to draw its "fork" form; empty when it draws none."""
    if workflow is None or workflow.status not in FINISHED_STATUSES or not model_admin.has_retry_permission(request):
        return {}
    url = reverse("admin:orchestration_workflow_fork", args=[quote(workflow.pk)])
    return {"fork": {"url": url, "last": workflow.current_step + 1}}


def fork(model_admin: WorkflowConsole, request: HttpRequest, object_id: str) -> HttpResponse:
    workflow = workflow_to_change(model_admin, request, object_id, model_admin.has_retry_permission(request))
    if request.method != "POST":
        return HttpResponseRedirect(change_url(workflow.pk))
    try:
        if workflow.status not in FINISHED_STATUSES:
            raise InvalidWorkflowInput(
                f"Workflow {workflow.pk} is {workflow.status}: only a finished run is forked here."
            )
        from_step = request.POST.get("from_step", "")
        if not from_step.isdigit():
            raise InvalidWorkflowInput(f"From step must be a step number, not {from_step!r}.")
        forked = fork_workflow(workflow.pk, int(from_step))
    except (InvalidWorkflowInput, UnknownWorkflowType) as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
        return HttpResponseRedirect(change_url(workflow.pk))
    model_admin.log_change(request, workflow, f"Forked from step {from_step} as workflow {forked.pk}.")
    model_admin.message_user(
        request,
        f"Workflow {forked.pk} forked from {workflow.pk} at step {from_step}: the steps before it are copied, "
        "it runs from that step on.",
        messages.SUCCESS,
    )
    return HttpResponseRedirect(change_url(forked.pk))

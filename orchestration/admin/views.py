"""The console's own pages, served under the workflow admin's URLs.

- the overview: the seed's three reports, queue depth, throttled queues,
  outcomes per hour as a bar chart, and the health of the two tables;
- the step repairs of a failed or cancelled workflow: retry from step N, and
  skip a failed step by supplying its output;
- sending an event to an unfinished workflow (a human approval, say), from a
  form on the workflow's page or a page of its own.

Each view checks its model permission, changes state only through
``orchestration.api``, and writes what it did to the admin log.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import psycopg
from django.contrib import messages
from django.contrib.admin import AdminSite
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db import OperationalError
from django.db.models.options import Options
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from .. import api, flow, moments, transitions, worker_rows
from ..conf import conf
from ..errors import InvalidTransition, InvalidWorkflowInput
from ..models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowStep, WorkflowWorker
from ..reports import charts, stats, step_window
from ..reports.listing import short_id
from ..waits import WaitKind, awaited_event
from .display import ago, change_url, changelist_url, queue_url, worker_url
from .forms import SendEventForm, SkipStepForm

logger = logging.getLogger(__name__)

#: Seconds a report of the overview may take before PostgreSQL cancels it, so a
#: huge table slows the page down but never hangs a web worker.
REPORT_TIME_LIMIT = 10.0

#: Stuck workflows listed on the overview; the rest are counted, and the list links to them all.
STUCK_ROWS_SHOWN = 20

#: Dead tuples, in percent of a table, from which the overview flags it...
DEAD_TUPLES_WARNING_PCT = 20
#: ...when they are that many too: a fresh table with a few updated rows and no
#: autovacuum yet is all dead tuples in percent, and healthy.
DEAD_TUPLES_WARNING_MIN = 10_000

#: Failed workflows listed on the overview.
RECENT_FAILURES_SHOWN = 10

#: Steps a retry from step N lists of those it discards; the rest are counted.
DISCARDED_SHOWN = 20


class WorkflowConsole(Protocol):
    """What these views use of the workflow admin, which passes itself in.

    Typed by what it does rather than by its class, so that this module need not
    import the module that imports it.
    """

    @property
    def admin_site(self) -> AdminSite: ...
    @property
    def opts(self) -> Options[Any]: ...
    def has_view_permission(self, request: HttpRequest) -> bool: ...
    def has_retry_permission(self, request: HttpRequest) -> bool: ...
    def has_cancel_permission(self, request: HttpRequest) -> bool: ...
    def has_send_event_permission(self, request: HttpRequest) -> bool: ...
    def get_object(self, request: HttpRequest, object_id: str) -> Workflow | None: ...
    def get_list_display(self, request: HttpRequest) -> Sequence[Any]: ...
    def get_actions(self, request: HttpRequest) -> Mapping[str, Any]: ...
    def message_user(self, request: HttpRequest, message: str, level: int) -> None: ...
    def log_change(self, request: HttpRequest, obj: Workflow, message: str) -> Any: ...


def _column_index(model_admin: WorkflowConsole, request: HttpRequest, column: str, **filters: str) -> str:
    """The list's ``o`` parameter that sorts on ``column``, as this user's list, with
    ``filters``, numbers its columns."""
    listing = copy.copy(request)
    listing.GET = QueryDict(urlencode(filters))
    columns = list(model_admin.get_list_display(listing))
    if model_admin.get_actions(request):
        columns.insert(0, "action_checkbox")
    return str(columns.index(column))


def _bounded(report: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """Run ``report`` under the time limit: its result and None, or None and why not."""
    try:
        with stats.time_limit(REPORT_TIME_LIMIT):
            return report(*args), None
    except OperationalError as exc:
        if not isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
            raise
        logger.warning("overview: %s took longer than %ss and was cancelled", report.__name__, REPORT_TIME_LIMIT)
        return None, (
            f"This report took longer than {REPORT_TIME_LIMIT:g} seconds and was cancelled; "
            "run `manage.py workflow_stats` for it."
        )


def needs_vacuum(health: Mapping[str, Any]) -> bool:
    """Whether a table's dead tuples (a row of ``stats.table_health``) are many and a large part of it."""
    dead_pct = health["dead_pct"] or 0
    return dead_pct >= DEAD_TUPLES_WARNING_PCT and health["dead_tuples"] >= DEAD_TUPLES_WARNING_MIN


def _live_workers() -> list[dict[str, Any]]:
    """The live ``runworkers`` processes, each with how many runs it holds and a link."""
    now = timezone.now()
    found = list(WorkflowWorker.objects.using(conf.DATABASE).filter(worker_rows.live_q()).order_by("-started_at"))
    held = worker_rows.held_counts([worker.pk for worker in found])
    return [
        {
            "id": worker.pk,
            "url": worker_url(worker.pk),
            "queues": ", ".join(worker.queues) if worker.queues else "every queue",
            "concurrency": worker.concurrency,
            "holds": held.get(worker.pk, 0),
            "holds_url": changelist_url(worker=worker.pk),
            "seen": ago(worker.last_seen_at, now),
        }
        for worker in found
    ]


def overview(model_admin: WorkflowConsole, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    success, success_problem = _bounded(stats.outcomes)
    failures, failures_problem = _bounded(stats.recent_failures, RECENT_FAILURES_SHOWN)
    workers, workers_problem = _bounded(_live_workers)
    stuck, stuck_problem = _bounded(stats.stuck_workflows)
    durations, durations_problem = _bounded(stats.recent_step_durations)
    waiting_runs, waiting_problem = _bounded(stats.waiting_runs)
    waiting = waiting_runs.by_kind() if waiting_runs else None
    depth, depth_problem = _bounded(stats.queue_depth, waiting_runs)
    hourly, hourly_problem = _bounded(stats.hourly_outcomes, 24)
    health, health_problem = _bounded(stats.table_health)
    oldest, oldest_problem = _bounded(stats.oldest_pending)
    queues, queues_problem = _bounded(flow.queue_states)
    now = timezone.now()
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Workflow overview",
        "opts": model_admin.opts,
        "success": [
            {
                **row,
                "url": changelist_url(workflow_type=row["workflow_type"]),
                "failed_url": changelist_url(workflow_type=row["workflow_type"], status__exact="failed"),
            }
            for row in (success.as_dicts() if success else [])
        ],
        "success_problem": success_problem,
        "failures": [
            {**row, "url": change_url(row["id"]), "short_id": short_id(row["id"]), "when": ago(row["finished_at"], now)}
            for row in (failures.as_dicts() if failures else [])
        ],
        "failures_url": changelist_url(status__exact="failed"),
        "failures_problem": failures_problem,
        "workers": workers or [],
        "workers_url": reverse("admin:orchestration_workflowworker_changelist"),
        "workers_problem": workers_problem,
        "stuck": [
            {
                **row,
                "url": change_url(row["id"]),
                "age": charts.format_duration((now - row["updated_at"]).total_seconds()),
            }
            for row in (stuck.as_dicts()[:STUCK_ROWS_SHOWN] if stuck else [])
        ],
        "stuck_total": len(stuck.rows) if stuck else 0,
        "stuck_list_url": changelist_url(
            status__exact="running", o=_column_index(model_admin, request, "heartbeat", status__exact="running")
        ),
        "stuck_problem": stuck_problem,
        "durations": durations.as_dicts() if durations else [],
        "recent_workflows": f"{stats.RECENT_WORKFLOWS:,}",
        "durations_problem": durations_problem,
        "depth": [
            {
                **row,
                "url": changelist_url(queue=row["queue"], status__exact="pending"),
                "waiting_url": changelist_url(queue=row["queue"], pending="waiting"),
                "oldest_label": ago(row["oldest_due"], now) if row["oldest_due"] else "",
            }
            for row in (depth.as_dicts() if depth else [])
        ],
        "depth_problem": depth_problem,
        "throttled": [
            {"name": state.name, "reasons": state.throttled, "due": state.due, "url": queue_url(state.name)}
            for state in queues or []
            if state.throttled
        ],
        "queues_problem": queues_problem,
        "queues_url": reverse("admin:orchestration_workflowqueue_changelist"),
        "waiting": [
            {
                "kind": kind.value,
                "label": kind.label,
                "count": waiting[kind.value],
                "url": changelist_url(pending=kind.value),
            }
            for kind in WaitKind
        ]
        if waiting
        else [],
        "waiting_total": sum(waiting.values()) if waiting else 0,
        "waiting_estimated": bool(waiting_runs and waiting_runs.estimated),
        "waiting_exact": f"{stats.WAITING_EXACT:,}",
        "waiting_url": changelist_url(pending="waiting"),
        "waiting_problem": waiting_problem,
        "chart": charts.hourly_bar_chart(
            [(moments.local(bucket.hour), bucket.completed, bucket.failed) for bucket in hourly or []],
            group_width=48,
        ),
        "zone": moments.local(now).strftime("%Z"),
        "hourly_problem": hourly_problem,
        "health": [
            {
                **row,
                "warn": needs_vacuum(row),
                "last_autovacuum_label": ago(row["last_autovacuum"], now) if row["last_autovacuum"] else "never",
                "last_vacuum_label": ago(row["last_vacuum"], now) if row["last_vacuum"] else "never",
                "last_autoanalyze_label": ago(row["last_autoanalyze"], now) if row["last_autoanalyze"] else "never",
            }
            for row in (health.as_dicts() if health else [])
        ],
        "health_problem": health_problem,
        "oldest": oldest
        and {
            **oldest,
            "url": change_url(oldest["id"]),
            "age_label": charts.format_duration(oldest["age"].total_seconds()),
        },
        "oldest_problem": oldest_problem,
        "dead_warning_pct": DEAD_TUPLES_WARNING_PCT,
        "dead_warning_min": f"{DEAD_TUPLES_WARNING_MIN:,}",
    }
    return TemplateResponse(request, "admin/orchestration/workflow/overview.html", context)


# -- step repairs ---------------------------------------------------------------


def _repair_target(
    model_admin: WorkflowConsole, request: HttpRequest, object_id: str, step_number: int
) -> tuple[Workflow, WorkflowStep]:
    if not (model_admin.has_view_permission(request) and model_admin.has_retry_permission(request)):
        raise PermissionDenied
    workflow = model_admin.get_object(request, unquote(object_id))
    if workflow is None:
        raise Http404(f"No workflow {object_id}.")
    step = WorkflowStep.objects.filter(workflow=workflow, step_number=step_number).first()
    if step is None:
        raise Http404(f"Workflow {object_id} has no step {step_number}.")
    return workflow, step


def _repair_page(
    model_admin: WorkflowConsole, request: HttpRequest, workflow: Workflow, step: WorkflowStep, **context: Any
) -> HttpResponse:
    return TemplateResponse(
        request,
        "admin/orchestration/workflow/step_action.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "workflow": workflow,
            "step": step,
            "change_url": change_url(workflow.pk),
            "repairable": workflow.status in transitions.REPAIRABLE,
            **context,
        },
    )


def retry_from_step(
    model_admin: WorkflowConsole, request: HttpRequest, object_id: str, step_number: int
) -> HttpResponse:
    workflow, step = _repair_target(model_admin, request, object_id, step_number)
    if request.method == "POST":
        try:
            api.retry_from_step(workflow.pk, step_number)
        except InvalidTransition as exc:
            model_admin.message_user(request, str(exc), messages.ERROR)
        else:
            model_admin.log_change(request, workflow, f"Retried from step {step_number} ({step.step_name}).")
            model_admin.message_user(
                request,
                f"Workflow {workflow.pk} is pending again; it resumes at step {step_number} "
                f"({step.step_name}), which runs again with every later step.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(change_url(workflow.pk))
    discarded = list(
        WorkflowStep.objects.filter(workflow=workflow, step_number__gte=step_number)
        .order_by("step_number")
        .values_list("step_number", "step_name", "status")[:DISCARDED_SHOWN]
    )
    last = step_window.last_step(workflow.pk)
    return _repair_page(
        model_admin,
        request,
        workflow,
        step,
        title=f"Retry from step {step_number}",
        action="retry",
        discarded=discarded,
        discarded_more=f"{last - step_number + 1 - len(discarded):,}"
        if last - step_number + 1 > len(discarded)
        else "",
        last=f"{last:,}",
    )


def skip_step(model_admin: WorkflowConsole, request: HttpRequest, object_id: str, step_number: int) -> HttpResponse:
    workflow, step = _repair_target(model_admin, request, object_id, step_number)
    form = SkipStepForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            api.skip_step(workflow.pk, step_number, form.cleaned_data["output"])
        except InvalidWorkflowInput as exc:
            form.add_error("output", str(exc))
        except InvalidTransition as exc:
            model_admin.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(change_url(workflow.pk))
        else:
            model_admin.log_change(
                request,
                workflow,
                f"Skipped failed step {step_number} ({step.step_name}) with output supplied by hand: "
                f"{json.dumps(form.cleaned_data['output'])[:500]}",
            )
            model_admin.message_user(
                request,
                f"Step {step_number} ({step.step_name}) recorded as completed; workflow {workflow.pk} "
                f"is pending again and resumes at step {step_number + 1}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(change_url(workflow.pk))
    skippable = workflow.status in transitions.REPAIRABLE and (
        step.status == StepStatus.FAILED and step.step_number == workflow.current_step + 1
    )
    return _repair_page(
        model_admin,
        request,
        workflow,
        step,
        title=f"Skip step {step_number}",
        action="skip",
        form=form,
        skippable=skippable,
    )


# -- sending an event ---------------------------------------------------------------


def send_event_context(model_admin: WorkflowConsole, request: HttpRequest, workflow: Workflow | None) -> dict[str, Any]:
    """What the workflow page needs to draw its "send an event" form; empty when it draws none."""
    if workflow is None or workflow.status in FINISHED_STATUSES or not model_admin.has_send_event_permission(request):
        return {}
    awaited = awaited_event(workflow.status, workflow.waiting_for)
    # Woken already (the event arrived; a worker resumes it soon): a second
    # approval would only queue a second event, so the form steps back.
    woken = awaited is not None and workflow.run_after is None
    return {
        "send_event": {
            "form": SendEventForm(initial={"name": awaited or "", "payload": ""}),
            "awaited": None if woken else awaited,
            "url": reverse("admin:orchestration_workflow_send_event", args=[quote(workflow.pk)]),
        }
    }


def workflow_to_change(model_admin: WorkflowConsole, request: HttpRequest, object_id: str, allowed: bool) -> Workflow:
    """The workflow a page changes, if the user may see it and is ``allowed`` to change it."""
    if not (model_admin.has_view_permission(request) and allowed):
        raise PermissionDenied
    workflow = model_admin.get_object(request, unquote(object_id))
    if workflow is None:
        raise Http404(f"No workflow {object_id}.")
    return workflow


def send_event(model_admin: WorkflowConsole, request: HttpRequest, object_id: str) -> HttpResponse:
    workflow = workflow_to_change(model_admin, request, object_id, model_admin.has_send_event_permission(request))
    awaited = awaited_event(workflow.status, workflow.waiting_for)
    form = SendEventForm(
        request.POST if request.method == "POST" else None, initial={"name": awaited or "", "payload": ""}
    )
    if form.is_valid():
        name, payload = form.cleaned_data["name"], form.cleaned_data["payload"]
        try:
            api.send_event(workflow.pk, name, payload)
        except InvalidWorkflowInput as exc:
            form.add_error("payload", str(exc))
        except (InvalidTransition, Workflow.DoesNotExist) as exc:
            model_admin.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(change_url(workflow.pk))
        else:
            model_admin.log_change(request, workflow, f"Sent event {name!r} with payload {json.dumps(payload)[:500]}.")
            text = f"Event {name!r} sent to workflow {workflow.pk}"
            if name == awaited:
                text += ", which was waiting for it; the next free worker resumes it."
            else:
                text += f", which is not waiting for {name!r}: it is kept until the workflow waits for it"
                text += f" (it waits for {awaited!r} now)." if awaited else "."
            model_admin.message_user(request, text, messages.SUCCESS if name == awaited else messages.WARNING)
            return HttpResponseRedirect(change_url(workflow.pk))
    return TemplateResponse(
        request,
        "admin/orchestration/workflow/send_event.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "Send an event",
            "workflow": workflow,
            "change_url": change_url(workflow.pk),
            "finished": workflow.status in FINISHED_STATUSES,
            "send_event": {"form": form, "awaited": awaited, "url": request.path},
        },
    )

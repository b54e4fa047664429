"""How the console shows a workflow: status badges (a pending one says why),
moments to the second, JSON, and links to the list and to a workflow's page.

The list, the workflow page, the step inline and the console's own pages all
draw with these, so this module imports nothing else of the admin.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from .. import moments
from ..conf import conf
from ..models import Workflow, WorkflowWorker
from ..reports.charts import format_duration
from ..reports.listing import progress_text
from ..validation import dumps_for_display
from ..waits import WAIT_FOREVER, PendingReason, Wait, pending_reason

#: Longest JSON text shown on a page; the rest is cut, with a note.
JSON_DISPLAY_LIMIT = 20_000


def queue_url(name: str) -> str:
    """The page of queue ``name``'s flow control."""
    return reverse("admin:orchestration_workflowqueue_change", args=[quote(name)])


def status_badge(status: str, title: str | None = None) -> SafeString:
    return format_html('<span class="orch-badge orch-{}" title="{}">{}</span>', status, title or "", status)


def waiting_what(waiting_for: str) -> str:
    """What a workflow waits for, without a timer's "until ..." (``run_after`` says it, capped by the deadline).
    A text no wait writes (a row changed by hand) is shown as it is."""
    wait = Wait.parse(waiting_for)
    return wait.what if wait is not None else waiting_for


def waiting_until(run_after: datetime.datetime | None, *, prefix: str = "until ") -> SafeString | str:
    """How long a wait lasts at most: its timer, or the time limit of its event or
    children (``run_after``); ``prefix`` goes before a moment, or "woken"."""
    if run_after is None:
        return "woken: due now"
    if moments.local(run_after) >= WAIT_FOREVER:
        return f"{prefix}woken" if prefix else "until woken (no time limit)"
    return format_html("{}{}", prefix, timestamp(run_after))


def pending_label(workflow: Workflow) -> SafeString:
    """The status of a pending workflow with why it is pending, and until when."""
    reason = pending_reason(workflow.run_after, workflow.waiting_for, workflow.error_message, timezone.now())
    line = '<span class="orch-why">{}</span>'
    if reason == PendingReason.WAITING:
        assert workflow.waiting_for is not None
        return format_html(
            "{}" + line + line,
            status_badge("waiting", f"pending: waiting for {workflow.waiting_for}"),
            waiting_what(workflow.waiting_for),
            waiting_until(workflow.run_after),
        )
    if reason in (PendingReason.RETRYING, PendingReason.SCHEDULED):
        return format_html(
            "{}" + line + line,
            status_badge(workflow.status, workflow.error_message),
            reason.value,
            format_html("at {}", timestamp(workflow.run_after)),
        )
    if workflow.waiting_for:  # woken, and not claimed yet
        return format_html(
            "{}" + line, status_badge(workflow.status, workflow.error_message), f"woken: {workflow.waiting_for}"
        )
    return status_badge(workflow.status, workflow.error_message)


def pretty_json(value: Any, limit: int = JSON_DISPLAY_LIMIT) -> SafeString:
    text = dumps_for_display(value, indent=2, ensure_ascii=False)
    if len(text) > limit:
        return format_html(
            '<pre class="orch-json">{}</pre><p class="help">Cut at {} of {} characters.</p>',
            text[:limit],
            limit,
            len(text),
        )
    return format_html('<pre class="orch-json">{}</pre>', text)


def timestamp(value: datetime.datetime | None, *, two_lines: bool = False) -> SafeString | str:
    """A moment to the second, in the current time zone, which it names (the
    admin's default drops seconds, and the zone)."""
    if value is None:
        return "—"
    local = moments.local(value)
    return format_html(
        '<time datetime="{}">{}{}{}</time>',
        local.isoformat(),
        local.strftime("%Y-%m-%d"),
        SafeString("<br>") if two_lines else " ",
        local.strftime("%H:%M:%S %Z"),
    )


def zoned(value: datetime.datetime) -> str:
    """A moment as plain text, with its zone: for a title attribute."""
    return moments.local(value).strftime("%Y-%m-%d %H:%M:%S %Z")


def ago(value: datetime.datetime | None, now: datetime.datetime | None = None) -> SafeString | str:
    """How long ago ``value`` was ("3 min ago"), the moment itself, with its zone, on hover."""
    if value is None:
        return "—"
    seconds = ((now or timezone.now()) - value).total_seconds()
    return format_html(
        '<time datetime="{}" title="{}">{} ago</time>', value.isoformat(), zoned(value), format_duration(seconds)
    )


def timestamp_column(
    field: str, description: str, *, two_lines: bool = False
) -> Callable[[Any, Any], SafeString | str]:
    """A column (or read-only field) showing ``field`` as ``timestamp`` does, sortable by it."""

    @admin.display(description=description, ordering=field)
    def show(model_admin: Any, obj: Any) -> SafeString | str:
        return timestamp(getattr(obj, field), two_lines=two_lines)

    return show


# -- links ----------------------------------------------------------------------


def change_url(workflow_id: Any) -> str:
    return reverse("admin:orchestration_workflow_change", args=[quote(workflow_id)])


def changelist_url(**filters: str) -> str:
    url = reverse("admin:orchestration_workflow_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def worker_url(worker_id: str) -> str:
    return reverse("admin:orchestration_workflowworker_change", args=[quote(worker_id)])


def worker_link(worker_id: str | None) -> SafeString | str:
    """A run's worker, linked to its page while its row exists (a stopped
    worker's row is deleted; a dead one's is kept a day, marked gone)."""
    if not worker_id:
        return "—"
    row = WorkflowWorker.objects.using(conf.DATABASE).filter(pk=worker_id).values("gone_at").first()
    if row is None:
        return format_html('{} <span class="orch-muted">(stopped)</span>', worker_id)
    gone = format_html(' <span class="orch-badge orch-failed">gone</span>') if row["gone_at"] else ""
    return format_html('<a href="{}">{}</a>{}', worker_url(worker_id), worker_id, gone)


def progress_bar(progress: Any, fraction: float) -> SafeString:
    """A run's progress as a bar (``listing.progress_fraction`` of it), its line as the title."""
    return format_html(
        '<progress class="orch-progress" max="100" value="{}" title="{}">{}%</progress>',
        round(fraction * 100),
        progress_text(progress),
        round(fraction * 100),
    )

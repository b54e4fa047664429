"""A workflow's steps, listed under its page: a window of them whatever their
number (``orchestration.reports.step_window``: the first, the last, the one the run is
at, a range asked for with ``?steps=FROM:TO``), links to the steps left out,
and the repairs a failed or cancelled workflow offers on each (retry from
here, skip with an output).

A table drawn from the rows read once, not an inline: a formset builds a form
for each row, and the admin's reads its rows again for each form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.template.defaultfilters import linebreaksbr
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import transitions
from ..models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from ..reports import charts, step_window
from .display import pretty_json, status_badge, timestamp_column

#: The request's parameter that asks for a range of steps: ``N``, ``FROM:TO``, ``FROM:`` or ``:TO``.
STEPS_PARAMETER = "steps"


@dataclass(frozen=True)
class StepRow:
    number: int
    cells: list[tuple[str, SafeString | str]]
    gap = None  # the template tells the two kinds of row apart by it


@dataclass(frozen=True)
class GapRow:
    gap: step_window.Gap
    links: list[tuple[str, str]]  # (label, url)

    @property
    def label(self) -> str:
        gap = self.gap
        return f"Step {gap.first:,}" if gap.count == 1 else f"Steps {gap.first:,}–{gap.last:,} ({gap.count:,})"


class StepsTable:
    """The rows of one run's steps table: a row per shown step, one per gap between them."""

    #: (column, heading), in the order shown: the repairs beside the status, where a narrow page still shows them.
    columns = (
        ("number", "#"),
        ("name", "name"),
        ("step_status", "status"),
        ("repair", "repair"),
        ("started", "started"),
        ("completed", "completed"),
        ("duration", "duration"),
        ("output", "output"),
        ("error_message", "error message"),
    )

    def __init__(
        self, workflow: Workflow, window: step_window.Window, *, can_repair: bool, link: Callable[[int, int], str]
    ) -> None:
        self.workflow = workflow
        self.window = window
        self.can_repair = can_repair
        self.link = link

    @property
    def rows(self) -> list[StepRow | GapRow]:
        before = {gap.first - 1: gap for gap in self.window.gaps}
        rows: list[StepRow | GapRow] = []
        for step in self.window.steps:
            rows.append(StepRow(step.step_number, [(name, getattr(self, name)(step)) for name, _ in self.columns]))
            if step.step_number in before:
                rows.append(self._gap(before[step.step_number]))
        return rows

    @property
    def shown(self) -> str:
        """Which steps the table shows, when not all of them."""
        window = self.window
        if window.whole and window.asked is None:
            return ""
        parts = (
            [f"the first {step_window.HEAD}", f"the last {step_window.TAIL}"]
            if window.last > step_window.WHOLE_UP_TO
            else []
        )
        at = window.at_fault
        if at is not None and step_window.HEAD < at.step_number <= window.last - step_window.TAIL:
            parts.append(f"step {at.step_number:,}, where the run is")
        if window.asked is not None:
            first, last = window.asked
            parts.append(f"steps {first:,}–{last:,} as asked" if last > first else f"step {first:,} as asked")
        listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else "all"
        return f"{len(window.steps):,} of {window.last:,} steps: {listed}."

    def _gap(self, gap: step_window.Gap) -> GapRow:
        """Links to the first page of the steps left out and, when there are more, to the last."""
        page = step_window.PAGE
        links = [(f"{gap.first:,}–{min(gap.first + page - 1, gap.last):,}", self.link(gap.first, gap.first + page - 1))]
        if gap.count > page:
            links.append((f"{gap.last - page + 1:,}–{gap.last:,}", self.link(gap.last - page + 1, gap.last)))
        return GapRow(gap, links)

    def number(self, step: WorkflowStep) -> int:
        return step.step_number

    def name(self, step: WorkflowStep) -> str:
        return step.step_name or "—"

    started = timestamp_column("started_at", "started", two_lines=True)
    completed = timestamp_column("completed_at", "completed", two_lines=True)

    def step_status(self, step: WorkflowStep) -> SafeString:
        if self._is_waiting(step):
            return status_badge("waiting", "pending: the workflow waits here")
        return status_badge(step.status)

    def duration(self, step: WorkflowStep) -> SafeString:
        running = step.status == StepStatus.RUNNING
        text = charts.format_elapsed(step.started_at, step.completed_at, timezone.now(), running=running)
        if step.attempts > 1:  # bodies run at least once: say when one ran more
            return format_html('{}<br><span class="orch-muted">run {} times</span>', text, step.attempts)
        return format_html("{}", text)

    def output(self, step: WorkflowStep) -> SafeString | str:
        # A waiting step's output holds what it waits for, until when.
        shown = step.status == StepStatus.COMPLETED or self._is_waiting(step)
        return pretty_json(step.output_data, limit=2_000) if shown else "—"

    def error_message(self, step: WorkflowStep) -> SafeString | str:
        return linebreaksbr(step.error_message) if step.error_message else "—"

    def _is_waiting(self, step: WorkflowStep) -> bool:
        """A wait (timer, event, children) records its step pending, with its details as output."""
        workflow = self.workflow
        return (
            step.status == StepStatus.PENDING
            and step.output_data is not None
            and workflow.status == WorkflowStatus.PENDING
            and step.step_number == workflow.current_step + 1
        )

    def repair(self, step: WorkflowStep) -> SafeString | str:
        workflow = self.workflow
        if not self.can_repair:
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


def window_of(workflow: Workflow) -> step_window.Window:
    """The window of steps ``workflow``'s page shows: read once a page (by ``steps_context``)."""
    window: step_window.Window | None = getattr(workflow, "_step_window", None)
    if window is None:
        window = step_window.read(workflow.pk, workflow.current_step)
        workflow._step_window = window  # type: ignore[attr-defined]
    return window


def _cut(asked: tuple[int, int | None] | None, window: step_window.Window) -> bool:
    """Whether the range shown is narrower than the one asked for (and the run's steps)."""
    if asked is None or window.asked is None:
        return False
    return window.asked[1] < min(asked[1] or window.last, window.last)


def steps_context(request: HttpRequest, workflow: Workflow | None) -> dict[str, Any]:
    """What the run page draws of its steps: the table, the range asked for, and what was wrong with it."""
    if workflow is None:
        return {}
    asked_text = request.GET.get(STEPS_PARAMETER, "").strip()
    problem = None
    asked = None
    if asked_text:
        try:
            asked = step_window.parse_range(asked_text)
        except step_window.InvalidRange as exc:
            problem = str(exc)
    window = step_window.read(workflow.pk, workflow.current_step, asked)
    workflow._step_window = window  # type: ignore[attr-defined]
    can_repair = workflow.status in transitions.REPAIRABLE and request.user.has_perm("orchestration.retry_workflow")

    def link(first: int, last: int) -> str:
        query = request.GET.copy()
        query[STEPS_PARAMETER] = f"{first}:{last}"
        return f"?{query.urlencode(safe=':')}#steps"

    others = request.GET.copy()
    others.pop(STEPS_PARAMETER, None)
    return {
        "steps_table": StepsTable(workflow, window, can_repair=can_repair, link=link),
        "steps_window": window,
        "steps_asked": asked_text,
        "steps_problem": problem,
        "steps_cut": _cut(asked, window),
        "steps_most": step_window.MOST_ASKED,
        "steps_page_after": step_window.PAGE - 1,
        "steps_kept": [(name, value) for name, values in others.lists() for value in values],
        "steps_reset": f"?{others.urlencode()}#steps" if others else "?#steps",
    }

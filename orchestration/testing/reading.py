"""A run read back for a test's assertions: its steps and its history, without SQL."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from ..conf import conf
from ..models import Workflow, WorkflowStep


class StepView(NamedTuple):
    """One step of a run as its row records it; compares equal to the tuple
    ``(number, name, status, output, error)``."""

    number: int
    name: str | None
    status: str
    output: Any
    error: str | None


def steps(workflow: Workflow | uuid.UUID | str) -> list[StepView]:
    """The run's steps in order: ``[(1, "charge card", "completed", {...}, None), ...]``."""
    rows = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id=_pk(workflow)).order_by("step_number")
    return [
        StepView(number, name, status, output, error)
        for number, name, status, output, error in rows.values_list(
            "step_number", "step_name", "status", "output_data", "error_message"
        )
    ]


def history(workflow: Workflow | uuid.UUID | str) -> list[dict[str, Any]]:
    """The run's failed attempts, oldest first: each a dict of ``attempt``,
    ``step`` (the step it failed at), ``status`` (what the run became:
    ``pending`` to retry, or ``failed``), ``message`` and ``at``."""
    recorded = Workflow.objects.using(conf.DATABASE).filter(pk=_pk(workflow)).values_list("error_history", flat=True)
    return list(reversed(recorded.first() or []))


def _pk(workflow: Workflow | uuid.UUID | str) -> Any:
    return workflow.pk if isinstance(workflow, Workflow) else workflow

"""A workflow's children as ``ctx`` starts and awaits them: their handles, the
tags they inherit, and the outcomes a ``wait_for`` reads and records."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import waits
from ..conf import conf
from ..errors import ChildWorkflowFailed
from ..models import Workflow


@dataclass(frozen=True, slots=True)  # no __dict__: a parent may hold 10,000 of them
class ChildHandle:
    """What ``ctx.start_child`` returns; pass a list of them to ``ctx.wait_for``."""

    workflow_id: uuid.UUID
    workflow_type: str


def inherited_tags(parent_id: uuid.UUID, own: Any) -> Any:
    """A child's tags: its parent's, then its ``own`` (checked by ``start_workflow``)."""
    parents = Workflow.objects.using(conf.DATABASE).filter(pk=parent_id).values_list("tags", flat=True).first()
    if own is not None and not isinstance(own, list | tuple):
        return own  # refused by start_workflow, as given
    return [*(parents or []), *(own or [])] or None


def failures(
    handles: Sequence[ChildHandle], outcomes: dict[uuid.UUID, dict[str, Any]]
) -> dict[int, ChildWorkflowFailed]:
    """The children of ``handles`` that failed, were cancelled or deleted, by
    their place in ``handles``, each as the error ``wait_for`` raises."""
    errors: dict[int, ChildWorkflowFailed] = {}
    for n, handle in enumerate(handles):
        child = outcomes.get(handle.workflow_id)
        if child is None:
            status, why = "deleted", "no longer exists: its row was deleted while this workflow waited for it"
        elif child["status"] in waits.UNSUCCESSFUL:
            status, why = child["status"], f"{child['status']}: {child['error_message']}"
        else:
            continue
        errors[n] = ChildWorkflowFailed(
            f"Child workflow {handle.workflow_id} ({handle.workflow_type}) {why}",
            workflow_id=handle.workflow_id,
            workflow_type=handle.workflow_type,
            status=status,
        )
    return errors


def failure_record(error: ChildWorkflowFailed) -> dict[str, Any]:
    """How a ``wait_for`` with ``return_exceptions`` records a child's failure."""
    return {
        "workflow_id": str(error.workflow_id),
        "workflow_type": error.workflow_type,
        "status": error.status,
        "message": str(error),
    }


def recorded_outcomes(output: Any, return_exceptions: bool) -> list[Any]:
    """A completed ``wait_for``'s outcomes as it returned them; a failure recorded
    there is raised (the first) or, with ``return_exceptions``, in its place."""
    if not isinstance(output, dict):
        return list(output)
    outputs = list(output["outputs"])
    for n, failure in sorted(output["errors"].items(), key=lambda item: int(item[0])):
        error = ChildWorkflowFailed(
            failure["message"],
            workflow_id=uuid.UUID(failure["workflow_id"]),
            workflow_type=failure["workflow_type"],
            status=failure["status"],
        )
        if not return_exceptions:
            raise error
        outputs[int(n)] = error
    return outputs

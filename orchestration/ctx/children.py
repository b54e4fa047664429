"""A workflow's children as ``ctx`` starts and awaits them: their handles, the
tags they inherit, and the outcomes a ``wait_for`` reads and records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .. import waits
from ..conf import conf
from ..errors import ChildWorkflowFailed
from ..models import Workflow, WorkflowStatus


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


#: What ``collect`` makes of a settled wait: the outputs in the order of the
#: handles (None where a child failed), and the failures by their place.
Collected = tuple[list[Any], dict[int, ChildWorkflowFailed]]


def collect(
    handles: Sequence[ChildHandle], rows: Iterator[tuple[str | None, Any, str | None]], return_exceptions: bool
) -> Collected | None:
    """The outcomes ``rows`` (``waits.awaited_outcomes``, one a handle, in
    order) as ``wait_for`` returns them; without ``return_exceptions``, up to
    the first child that failed, was cancelled or deleted, which ends it (the
    rest are not read). None if the wait cannot end after all: a child has not
    finished (retried since the wait was found settled) and none failed."""
    outputs: list[Any] = []
    errors: dict[int, ChildWorkflowFailed] = {}
    unfinished = False
    for n, (handle, (status, output, message)) in enumerate(zip(handles, rows, strict=True)):
        if status == WorkflowStatus.COMPLETED:
            outputs.append(output)
            continue
        if status is None:
            status, why = "deleted", "no longer exists: its row was deleted while this workflow waited for it"
        elif status in waits.UNSUCCESSFUL:
            why = f"{status}: {message}"
        elif return_exceptions:
            return None
        else:  # a failure further on still ends the wait
            unfinished = True
            outputs.append(None)
            continue
        errors[n] = ChildWorkflowFailed(
            f"Child workflow {handle.workflow_id} ({handle.workflow_type}) {why}",
            workflow_id=handle.workflow_id,
            workflow_type=handle.workflow_type,
            status=status,
        )
        if not return_exceptions:
            break
        outputs.append(None)
    return None if unfinished and not errors else (outputs, errors)


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

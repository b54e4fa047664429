"""Start, retry, cancel and restart workflows: the public state transitions.

The admin actions, the management commands and user code all call these
functions, so every operator-visible transition has one implementation. Each is
a single conditional UPDATE, so it is safe against a worker changing the same
row at the same moment.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from .conf import conf
from .errors import InvalidTransition
from .models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from .registry import get_workflow
from .sql import notify_new_work
from .validation import to_json_value, validate_options, validate_workflow_type

WorkflowRef = Workflow | uuid.UUID | str


def start_workflow(
    workflow_type: str,
    input_data: Any = None,
    *,
    idempotency_key: str | None = None,
    run_after: datetime.datetime | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_retries: int | None = None,
) -> Workflow:
    """Enqueue a run of ``workflow_type`` and return its row.

    Inside ``transaction.atomic()`` the workflow becomes visible to workers only
    when the transaction commits. With an ``idempotency_key`` that was used
    before, the first workflow is returned and nothing new is created.
    """
    validate_workflow_type(workflow_type)
    definition = get_workflow(workflow_type)
    queue = definition.queue if queue is None else queue
    priority = definition.priority if priority is None else priority
    if max_retries is None:
        max_retries = conf.DEFAULT_MAX_RETRIES if definition.max_retries is None else definition.max_retries
    validate_options(
        idempotency_key=idempotency_key, run_after=run_after, queue=queue, priority=priority, max_retries=max_retries
    )
    workflow = Workflow(
        workflow_type=workflow_type,
        input_data=to_json_value(input_data, f"The input of workflow {workflow_type!r}"),
        idempotency_key=idempotency_key,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
    )
    alias = conf.DATABASE
    with transaction.atomic(using=alias):
        if idempotency_key is None:
            workflow.save(using=alias, force_insert=True)
        else:
            # ON CONFLICT DO NOTHING waits for a concurrent insert of the same
            # key to commit or roll back, so exactly one row ever wins.
            Workflow.objects.using(alias).bulk_create([workflow], ignore_conflicts=True)
            winner = Workflow.objects.using(alias).get(idempotency_key=idempotency_key)
            if winner.pk != workflow.pk:
                return winner
        notify_new_work(alias, queue)
    workflow.refresh_from_db(using=alias)
    return workflow


def retry_workflow(workflow: WorkflowRef) -> Workflow:
    """Send a failed or cancelled workflow back to pending with fresh attempts.

    Completed steps keep their checkpoints, so it resumes after the last one.
    """
    return _transition(
        workflow,
        "retry",
        allowed_from=(WorkflowStatus.FAILED, WorkflowStatus.CANCELLED),
        changes=dict(status=WorkflowStatus.PENDING, **_FRESH_RUN),
    )


def restart_workflow(workflow: WorkflowRef) -> Workflow:
    """Run a finished workflow again from its first step, discarding every checkpoint."""
    return _transition(
        workflow,
        "restart",
        allowed_from=(WorkflowStatus.FAILED, WorkflowStatus.CANCELLED, WorkflowStatus.COMPLETED),
        changes=dict(status=WorkflowStatus.PENDING, current_step=0, output_data=None, **_FRESH_RUN),
        discard_steps_after=0,
    )


def cancel_workflow(workflow: WorkflowRef, reason: str = "Cancelled.") -> Workflow:
    """Cancel a pending or running workflow.

    A running workflow's worker notices at its next step boundary (or
    heartbeat) and writes nothing more; the step it was running is marked
    failed now, since its result will never be recorded.
    """
    workflow_id = _workflow_id(workflow)
    alias = conf.DATABASE
    with transaction.atomic(using=alias):
        result = _transition(
            workflow_id,
            "cancel",
            allowed_from=(WorkflowStatus.PENDING, WorkflowStatus.RUNNING),
            changes=dict(
                status=WorkflowStatus.CANCELLED,
                error_message=reason,
                finished_at=Now(),
                lease_token=None,
                run_after=None,
            ),
            notify=False,
        )
        WorkflowStep.objects.using(alias).filter(workflow_id=workflow_id, status=StepStatus.RUNNING).update(
            status=StepStatus.FAILED,
            error_message=f"Workflow cancelled while this step ran: {reason}",
            completed_at=Now(),
        )
    return result


_FRESH_RUN: dict[str, Any] = dict(
    attempts=0,
    error_message=None,
    error_traceback=None,
    run_after=None,
    lease_token=None,
    finished_at=None,
    worker_deaths=0,
    lost_at_step=None,
)


def _workflow_id(workflow: WorkflowRef) -> uuid.UUID:
    if isinstance(workflow, Workflow):
        return workflow.pk
    return workflow if isinstance(workflow, uuid.UUID) else uuid.UUID(str(workflow))


def _transition(
    workflow: WorkflowRef,
    verb: str,
    *,
    allowed_from: tuple[str, ...],
    changes: dict[str, Any],
    discard_steps_after: int | None = None,
    notify: bool = True,
) -> Workflow:
    workflow_id = _workflow_id(workflow)
    alias = conf.DATABASE
    rows = Workflow.objects.using(alias)
    with transaction.atomic(using=alias):
        changed = rows.filter(pk=workflow_id, status__in=allowed_from).update(updated_at=Now(), **changes)
        current = rows.get(pk=workflow_id)  # raises Workflow.DoesNotExist for an unknown id
        if not changed:
            raise InvalidTransition(
                f"Cannot {verb} workflow {workflow_id}: it is {current.status}, "
                f"and only a {' or '.join(allowed_from)} workflow can be."
            )
        if discard_steps_after is not None:
            WorkflowStep.objects.using(alias).filter(
                workflow_id=workflow_id, step_number__gt=discard_steps_after
            ).delete()
        if notify:
            notify_new_work(alias, current.queue)
    return current


__all__ = [
    "cancel_workflow",
    "restart_workflow",
    "retry_workflow",
    "start_workflow",
]

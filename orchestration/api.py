"""Start, retry, cancel and restart workflows: the public state transitions.

The admin actions, the management commands and user code all call these
functions, so every operator-visible transition has one implementation. Each is
a single conditional UPDATE, so it is safe against a worker changing the same
row at the same moment.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Least, Now
from django.utils import timezone

from .conf import conf
from .errors import InvalidTransition, InvalidWorkflowInput
from .models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep
from .registry import get_workflow
from .sql import insert_workflows, notify_new_work
from .validation import (
    to_json_text,
    to_json_value,
    validate_event_name,
    validate_options,
    validate_timeout,
    validate_workflow_type,
)

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
    timeout: float | datetime.timedelta | None = None,
) -> Workflow:
    """Enqueue a run of ``workflow_type`` and return its row.

    Inside ``transaction.atomic()`` the workflow becomes visible to workers only
    when the transaction commits. With an ``idempotency_key`` that was used
    before, the first workflow is returned and nothing new is created. A
    ``timeout`` (seconds or timedelta; default the decorator's) cancels the run
    at its next step boundary once that long has passed since now.
    """
    options = _new_workflow_options(
        workflow_type,
        idempotency_key=idempotency_key,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
        timeout=timeout,
    )
    encoded = to_json_text(input_data, f"The input of workflow {workflow_type!r}")
    return _insert(options, f"[{encoded}]", [idempotency_key])[0]


def start_workflows(
    workflow_type: str,
    inputs: Iterable[Any],
    *,
    idempotency_keys: Iterable[str | None] | None = None,
    run_after: datetime.datetime | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_retries: int | None = None,
    timeout: float | datetime.timedelta | None = None,
) -> list[Workflow]:
    """Enqueue one run of ``workflow_type`` per item of ``inputs`` in a single
    statement (one round trip), and return their rows in the order of ``inputs``.

    The options apply to every run, as in ``start_workflow``. Either every row
    is written or none. Inside ``transaction.atomic()`` the runs become visible
    to workers when the transaction commits, and idle workers are woken once.
    ``idempotency_keys``, when given, pairs a key (or None) with each input: a
    key used before, or earlier in the same batch, returns that workflow
    instead of creating another.
    """
    options = _new_workflow_options(
        workflow_type,
        idempotency_key=None,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
        timeout=timeout,
    )
    inputs = list(inputs)
    keys: list[str | None] = [None] * len(inputs) if idempotency_keys is None else list(idempotency_keys)
    if len(keys) != len(inputs):
        raise InvalidWorkflowInput(f"start_workflows got {len(inputs)} inputs but {len(keys)} idempotency keys.")
    checks = {name: options[name] for name in ("run_after", "queue", "priority", "max_retries")}
    for key in {key for key in keys if key is not None}:
        validate_options(idempotency_key=key, **checks)
    if not inputs:
        return []
    return _insert(options, _inputs_as_json_array(inputs, workflow_type), keys)


def _inputs_as_json_array(inputs: list[Any], workflow_type: str) -> str:
    """The JSON array of ``inputs``, each checked as ``to_json_text`` checks
    one. Encoded as one array when that is short enough to hold no input over
    the size limit: encoding them one by one was a tenth of a bulk start."""
    with contextlib.suppress(TypeError, ValueError):
        encoded = json.dumps(inputs, allow_nan=False)
        if len(encoded) <= conf.MAX_PAYLOAD_BYTES and "\\u0000" not in encoded:
            return encoded
    items = (to_json_text(value, f"Input {n} of workflow {workflow_type!r}") for n, value in enumerate(inputs))
    return f"[{','.join(items)}]"  # or raise, naming the input at fault


def _insert(options: dict[str, Any], inputs: str, keys: list[str | None]) -> list[Workflow]:
    """Insert a workflow per item of the JSON array ``inputs`` in one statement
    (one round trip; in autocommit mode, one transaction) and wake the workers;
    a key of ``keys`` (one an item) used before returns that key's workflow instead."""
    alias = conf.DATABASE
    ids = time_ordered_uuids(len(keys))
    created = {workflow.pk: workflow for workflow in insert_workflows(alias, options, ids, inputs, keys)}
    by_key: dict[str | None, Workflow] = {w.idempotency_key: w for w in created.values() if w.idempotency_key}
    missing = {key for key, pk in zip(keys, ids, strict=True) if pk not in created and key not in by_key}
    if missing:
        # Keys used before: ON CONFLICT DO NOTHING waited for any concurrent
        # insert of them to commit, so this (later) statement sees the winners.
        by_key.update((w.idempotency_key, w) for w in Workflow.objects.using(alias).filter(idempotency_key__in=missing))
    return [created.get(pk) or by_key[key] for pk, key in zip(ids, keys, strict=True)]


def time_ordered_uuid() -> uuid.UUID:
    return time_ordered_uuids(1)[0]


def time_ordered_uuids(count: int) -> list[uuid.UUID]:
    """``count`` UUIDv7 (RFC 9562): 48 bits of Unix time in milliseconds, then 74
    random bits. New workflows' ids, and so their rows in every index keyed
    by them (the primary key, the steps' ``(workflow_id, step_number)``), land
    together at the right edge of the B-tree instead of on random pages of it:
    with a million finished workflows, random ids made each workflow read
    index pages from outside PostgreSQL's buffer cache (``read=`` in the
    claim's EXPLAIN). Python has ``uuid.uuid7`` only from 3.14."""
    milliseconds = time.time_ns() // 1_000_000
    version = (milliseconds & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    randomness = os.urandom(10 * count)  # one system call for all
    ids = []
    for start in range(0, 10 * count, 10):
        bits = int.from_bytes(randomness[start : start + 10])
        ids.append(uuid.UUID(int=version | ((bits >> 62) & 0xFFF) << 64 | bits & ((1 << 62) - 1)))
    return ids


def send_event(workflow: WorkflowRef, name: str, payload: Any = None) -> WorkflowEvent:
    """Send event ``name`` with a JSON ``payload`` to a workflow.

    The event is stored until the workflow's ``ctx.wait_for_event(name)``
    consumes it, so it may be sent before the workflow waits. A workflow
    waiting for it is woken at once.
    """
    validate_event_name(name)
    workflow_id = _workflow_id(workflow)
    value = to_json_value(payload, f"The payload of event {name!r}")
    alias = conf.DATABASE
    with transaction.atomic(using=alias):
        current = Workflow.objects.using(alias).select_for_update().filter(pk=workflow_id).values("status", "queue")
        row = current.first()
        if row is None:
            raise Workflow.DoesNotExist(f"No workflow {workflow_id} to send event {name!r} to.")
        if row["status"] in FINISHED_STATUSES:
            raise InvalidTransition(f"Cannot send event {name!r} to workflow {workflow_id}: it is {row['status']}.")
        event = WorkflowEvent.objects.using(alias).create(workflow_id=workflow_id, name=name, payload=value)
        woken = (
            Workflow.objects.using(alias)
            .filter(pk=workflow_id, status=WorkflowStatus.PENDING, waiting_for=f"event: {name}")
            .update(run_after=None)
        )
        if woken:
            notify_new_work(alias, row["queue"])
    return event


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
        steps = WorkflowStep.objects.using(alias).filter(workflow_id=workflow_id)
        steps.filter(status=StepStatus.RUNNING).fail(f"Workflow cancelled while this step ran: {reason}")
        # A wait (timer, event, children) recorded but not over ends here too.
        steps.filter(status=StepStatus.PENDING).fail(f"Workflow cancelled while it waited: {reason}")
    return result


#: States an operator can repair a workflow from (retry, retry from a step, skip a step).
REPAIRABLE = (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)


def retry_from_step(workflow: WorkflowRef, step_number: int) -> Workflow:
    """Send a failed or cancelled workflow back to pending from step ``step_number``.

    The checkpoints of that step and of every later one are discarded, so they
    run again; earlier steps keep theirs and replay from them. Attempts start afresh.
    """
    _check_step_number(step_number, "retry from")
    return _transition(
        workflow,
        "retry",
        allowed_from=REPAIRABLE,
        changes=dict(
            status=WorkflowStatus.PENDING,
            current_step=Least(F("current_step"), step_number - 1),
            output_data=None,
            **_FRESH_RUN,
        ),
        discard_steps_after=step_number - 1,
    )


def skip_step(workflow: WorkflowRef, step_number: int, output: Any) -> Workflow:
    """Record ``output`` as the result of a failed step, and resume the workflow after it.

    For a failed or cancelled workflow whose step ``step_number`` (the one after
    its last completed step) failed, when an operator did that step's work by
    hand: the step becomes completed with ``output`` as its checkpoint, and the
    workflow goes back to pending with fresh attempts, resuming at the next step.
    """
    _check_step_number(step_number, "skip")
    value = to_json_value(output, f"The output supplied for step {step_number}")
    workflow_id = _workflow_id(workflow)
    alias = conf.DATABASE
    requirement = f"a failed or cancelled workflow whose step {step_number} failed, right after its last completed one"
    with transaction.atomic(using=alias):
        # The conditional UPDATE of the workflow row locks it first, so no worker
        # or other transition can change the workflow or its steps meanwhile.
        result = _transition(
            workflow_id,
            f"skip step {step_number} of",
            allowed_from=REPAIRABLE,
            where=Q(current_step=step_number - 1),
            requirement=requirement,
            changes=dict(status=WorkflowStatus.PENDING, current_step=step_number, **_FRESH_RUN),
        )
        skipped = (
            WorkflowStep.objects.using(alias)
            .filter(workflow_id=workflow_id, step_number=step_number, status=StepStatus.FAILED)
            .update(status=StepStatus.COMPLETED, output_data=value, completed_at=Now(), error_message=None)
        )
        if not skipped:
            raise InvalidTransition(
                f"Cannot skip step {step_number} of workflow {workflow_id}: that step has not failed; "
                f"only {requirement} can be."
            )
    return result


def requeue_stuck(workflow: WorkflowRef, stuck_after: float | None = None) -> Workflow:
    """Send a running workflow whose worker stopped heartbeating back to pending.

    Only a workflow with no heartbeat for ``stuck_after`` seconds (default
    ``STUCK_AFTER``) qualifies, so a live worker is never robbed of its work. As
    in the workers' own sweep, the attempt stays spent and the step that was
    running is marked failed; the dead worker's lease is revoked, so it can
    write nothing more should it wake up.
    """
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    workflow_id = _workflow_id(workflow)
    alias = conf.DATABASE
    reason = f"requeued by an operator: no heartbeat for {stuck_after:g} seconds"
    with transaction.atomic(using=alias):
        result = _transition(
            workflow_id,
            "requeue",
            allowed_from=(WorkflowStatus.RUNNING,),
            where=Q(updated_at__lt=Now() - datetime.timedelta(seconds=stuck_after)),
            requirement=f"a running workflow with no heartbeat for {stuck_after:g} seconds",
            changes=dict(status=WorkflowStatus.PENDING, lease_token=None, run_after=None, error_message=reason),
        )
        WorkflowStep.objects.using(alias).filter(workflow_id=workflow_id, status=StepStatus.RUNNING).fail(reason)
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


def _new_workflow_options(
    workflow_type: str,
    *,
    idempotency_key: str | None,
    run_after: datetime.datetime | None,
    queue: str | None,
    priority: int | None,
    max_retries: int | None,
    timeout: float | datetime.timedelta | None,
) -> dict[str, Any]:
    """Validated column values of a new run: an option given wins over the
    decorator's, which wins over the settings'. Raises before anything is written."""
    validate_workflow_type(workflow_type)
    definition = get_workflow(workflow_type)
    queue = definition.queue if queue is None else queue
    priority = definition.priority if priority is None else priority
    if max_retries is None:
        max_retries = conf.DEFAULT_MAX_RETRIES if definition.max_retries is None else definition.max_retries
    validate_options(
        idempotency_key=idempotency_key, run_after=run_after, queue=queue, priority=priority, max_retries=max_retries
    )
    limit = validate_timeout(definition.timeout if timeout is None else timeout)
    return dict(
        workflow_type=workflow_type,
        deadline=timezone.now() + limit if limit is not None else None,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
    )


def _check_step_number(step_number: Any, verb: str) -> None:
    if isinstance(step_number, bool) or not isinstance(step_number, int) or step_number < 1:
        raise InvalidTransition(f"Cannot {verb} step {step_number!r}: steps are numbered from 1.")


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
    where: Q | None = None,
    requirement: str | None = None,
) -> Workflow:
    workflow_id = _workflow_id(workflow)
    alias = conf.DATABASE
    rows = Workflow.objects.using(alias)
    with transaction.atomic(using=alias):
        candidates = rows.filter(pk=workflow_id, status__in=allowed_from)
        if where is not None:
            candidates = candidates.filter(where)
        changed = candidates.update(updated_at=Now(), **changes)
        current = rows.get(pk=workflow_id)  # raises Workflow.DoesNotExist for an unknown id
        if not changed:
            requirement = requirement or f"a {' or '.join(allowed_from)} workflow"
            raise InvalidTransition(
                f"Cannot {verb} workflow {workflow_id}: it is {current.status}, and only {requirement} can be."
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
    "requeue_stuck",
    "restart_workflow",
    "retry_from_step",
    "retry_workflow",
    "send_event",
    "skip_step",
    "start_workflow",
    "start_workflows",
]

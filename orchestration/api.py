"""The public API: start workflows, send them events, and repair them.

The admin actions, the management commands and user code all call these
functions. Starting validates every option before anything is written
(``enqueue`` writes); the repairs (retry, restart, cancel, ...) are the
operator's moves of ``transitions`` and ``recovery``, exported here.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.db import transaction

from . import clock, enqueue, moments
from .conf import conf
from .errors import InvalidTransition, InvalidWorkflowInput
from .inputs import as_json
from .models import FINISHED_STATUSES, Workflow, WorkflowEvent
from .observability import tracing
from .recovery import requeue_stuck
from .registry import check_startable, get_workflow
from .transitions import (
    WorkflowRef,
    cancel_workflow,
    pause_workflow,
    restart_workflow,
    resume_workflow,
    retry_from_step,
    retry_workflow,
    skip_step,
    workflow_id_of,
)
from .validation import (
    to_json_text,
    to_json_value,
    validate_concurrency_key,
    validate_event_name,
    validate_key_scope,
    validate_options,
    validate_tags,
    validate_timeout,
    validate_workflow_type,
)
from .waits import awaited_event, wake_event_waiter

T = TypeVar("T")


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
    concurrency_key: str | None = None,
    unique_while_active: bool = False,
    debounce: float | datetime.timedelta | None = None,
    tags: list[str] | None = None,
) -> Workflow:
    """Enqueue a run of ``workflow_type`` and return its row.

    Inside ``transaction.atomic()`` the workflow becomes visible to workers only
    when the transaction commits. With an ``idempotency_key`` that was used
    before, the first workflow is returned and nothing new is created. A
    ``timeout`` (seconds or timedelta; default the decorator's) cancels the run
    at its next step boundary once that long has passed since now. Runs of one
    ``concurrency_key`` (default: the decorator's function of the input) count
    against their queue's per-key limits.

    With ``unique_while_active=True`` the ``idempotency_key`` holds only while
    its run is pending or running: a start meanwhile returns that run, a start
    after it ended makes a new one. With ``debounce`` (seconds or timedelta)
    the starts of the key within that window after the first become one run,
    which starts when the window ends with the latest start's input (and its
    ``timeout`` counts from then). ``tags``, a list of strings, label the run:
    ``Workflow.objects.filter(tags__contains=["customer-42"])`` finds it.
    """
    scope, window = validate_key_scope(idempotency_key, unique_while_active, debounce, run_after)
    if window is not None:
        run_after = clock.now() + window
    options = _new_workflow_options(
        workflow_type,
        idempotency_key=idempotency_key,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
        timeout=timeout,
        tags=tags,
    )
    if window is not None and options["timeout"] is not None:  # its time limit counts from when it starts
        options["deadline"] = run_after + options["timeout"]
    input_data = _checked_inputs(workflow_type, [input_data])[0]
    keys = _concurrency_keys(workflow_type, [input_data], None if concurrency_key is None else [concurrency_key])
    if keys is not None and keys[0] is not None:
        options["concurrency_key"] = keys[0]
    encoded = to_json_text(input_data, f"The input of workflow {workflow_type!r}")
    if scope is not None:
        options["key_scope"] = scope
    return enqueue.insert(conf.DATABASE, options, f"[{encoded}]", [idempotency_key], scope=scope)[0]


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
    concurrency_keys: Iterable[str | None] | None = None,
    tags: list[str] | None = None,
) -> list[Workflow]:
    """Enqueue one run of ``workflow_type`` per item of ``inputs`` in a single
    statement (one round trip), and return their rows in the order of ``inputs``.

    The options apply to every run, as in ``start_workflow``. Either every row
    is written or none. Inside ``transaction.atomic()`` the runs become visible
    to workers when the transaction commits, and idle workers are woken once.
    ``idempotency_keys``, when given, pairs a key (or None) with each input: a
    key used before, or earlier in the same batch, returns that workflow
    instead of creating another. ``concurrency_keys`` pairs a concurrency key
    (or None) with each input (default: the decorator's function of each).
    """
    options: dict[str, Any] = dict(
        run_after=run_after, queue=queue, priority=priority, max_retries=max_retries, tags=tags
    )
    keys = {"idempotency_keys": idempotency_keys, "concurrency_keys": concurrency_keys}
    return start_batch(workflow_type, inputs, {}, **keys, **options, timeout=timeout)


def start_batch(workflow_type: str, inputs: Iterable[Any], columns: dict[str, Any], **options: Any) -> list[Workflow]:
    """``start_workflows`` (``options``: its options), every row also given
    ``columns``: the engine's."""
    return _batch(enqueue.insert, workflow_type, inputs, columns, **options)


def start_batch_ids(
    workflow_type: str, inputs: Iterable[Any], columns: dict[str, Any], **options: Any
) -> list[uuid.UUID]:
    """``start_batch``, returning only the runs' ids (``enqueue.insert_ids``):
    ``ctx.start_children`` keeps nothing else of its children."""
    return _batch(enqueue.insert_ids, workflow_type, inputs, columns, **options)


def _batch(
    insert: Callable[..., list[T]],
    workflow_type: str,
    inputs: Iterable[Any],
    columns: dict[str, Any],
    *,
    idempotency_keys: Iterable[str | None] | None = None,
    concurrency_keys: Iterable[str | None] | None = None,
    **start_options: Any,
) -> list[T]:
    """Check a batch's options, keys and inputs, and ``insert`` its runs in one statement."""
    options = _new_workflow_options(workflow_type, idempotency_key=None, **start_options)
    inputs = list(inputs)
    keys: list[str | None] = [None] * len(inputs) if idempotency_keys is None else list(idempotency_keys)
    if len(keys) != len(inputs):
        raise InvalidWorkflowInput(f"start_workflows got {len(inputs)} inputs but {len(keys)} idempotency keys.")
    checks = {name: options[name] for name in ("queue", "priority", "max_retries")}
    for key in {key for key in keys if key is not None}:
        validate_options(idempotency_key=key, **checks)
    if not inputs:
        return []
    inputs = _checked_inputs(workflow_type, inputs, in_batch=True)
    given = None if concurrency_keys is None else list(concurrency_keys)
    if given is not None and len(given) != len(inputs):
        raise InvalidWorkflowInput(f"start_workflows got {len(inputs)} inputs but {len(given)} concurrency keys.")
    per_row = _concurrency_keys(workflow_type, inputs, given)
    if per_row is not None and len(set(per_row)) == 1:  # one key for all: a column they share
        if per_row[0] is not None:
            options["concurrency_key"] = per_row[0]
        per_row = None
    encoded = _inputs_as_json_array(inputs, workflow_type)
    return insert(conf.DATABASE, {**options, **columns}, encoded, keys, per_row)


def check_input(workflow_type: str, input_data: Any) -> None:
    """Check ``input_data`` as ``start_workflow`` would (the type, its declared
    input, its ``concurrency_key`` function, JSON and size), writing nothing:
    for a schedule's input, checked when it is saved rather than at each tick."""
    validate_workflow_type(workflow_type)
    get_workflow(workflow_type)
    check_startable(workflow_type)
    stored = _checked_inputs(workflow_type, [input_data])[0]
    _concurrency_keys(workflow_type, [stored], None)
    to_json_text(stored, f"The input of workflow {workflow_type!r}")


def _checked_inputs(workflow_type: str, inputs: list[Any], *, in_batch: bool = False) -> list[Any]:
    """``inputs`` as they are stored, each checked by the workflow's declared
    input; the first refused raises, naming it (in a batch, by its index)."""
    definition = get_workflow(workflow_type)
    if definition.input_schema is None:
        return inputs
    for n, data in enumerate(inputs):
        definition.argument(data, f"Input {n}" if in_batch else "The input")
    return [as_json(definition.input_schema, data) for data in inputs]


def _concurrency_keys(workflow_type: str, inputs: list[Any], given: list[Any] | None) -> list[str | None] | None:
    """The concurrency key of each run: given, else the decorator's function of
    its input; None when no run has one."""
    function = get_workflow(workflow_type).concurrency_key
    if given is None and function is None:
        return None
    if given is not None:
        return [validate_concurrency_key(key) for key in given]
    keys = []
    for n, data in enumerate(inputs):
        try:
            key = function(data)  # type: ignore[misc]  # not None when none is given
        except Exception as exc:
            raise InvalidWorkflowInput(
                f"The concurrency_key function of workflow {workflow_type!r} failed on input {n}: {exc!r}"
            ) from exc
        keys.append(validate_concurrency_key(key))
    return keys


def _inputs_as_json_array(inputs: list[Any], workflow_type: str) -> str:
    """The JSON array of ``inputs``, each checked by ``to_json_text``. Checked
    as one array first, which is cheaper than one by one: an array that passes
    (its size within the limit, its depth one more) holds no input that fails."""
    with contextlib.suppress(InvalidWorkflowInput):
        return to_json_text(inputs, "inputs")
    items = (to_json_text(value, f"Input {n} of workflow {workflow_type!r}") for n, value in enumerate(inputs))
    return f"[{','.join(items)}]"  # or raise, naming the input at fault


def send_event(workflow: WorkflowRef, name: str, payload: Any = None) -> WorkflowEvent:
    """Send event ``name`` with a JSON ``payload`` to a workflow.

    The event is stored until the workflow's ``ctx.wait_for_event(name)``
    consumes it, so it may be sent before the workflow waits. A workflow
    waiting for it is woken at once. The event returned says which:
    ``event.awaited`` is True when the run was waiting for ``name``, and
    ``event.waiting_for`` names the event it waits for instead (None: none),
    so that a misspelt name is seen rather than kept unread.
    """
    validate_event_name(name)
    workflow_id = workflow_id_of(workflow)
    value = to_json_value(payload, f"The payload of event {name!r}")
    alias = conf.DATABASE
    with transaction.atomic(using=alias):
        current = (
            Workflow.objects.using(alias)
            .select_for_update()
            .filter(pk=workflow_id)
            .values("status", "queue", "waiting_for")
        )
        row = current.first()
        if row is None:
            raise Workflow.DoesNotExist(f"No workflow {workflow_id} to send event {name!r} to.")
        if row["status"] in FINISHED_STATUSES:
            raise InvalidTransition(f"Cannot send event {name!r} to workflow {workflow_id}: it is {row['status']}.")
        event = WorkflowEvent.objects.using(alias).create(workflow_id=workflow_id, name=name, payload=value)
        wake_event_waiter(workflow_id, name, row["queue"])
    event.waiting_for = awaited_event(row["status"], row["waiting_for"])
    event.awaited = event.waiting_for == name
    return event


def _new_workflow_options(
    workflow_type: str,
    *,
    idempotency_key: str | None,
    run_after: datetime.datetime | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_retries: int | None = None,
    timeout: float | datetime.timedelta | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """Validated column values of a new run: an option given wins over the
    decorator's, which wins over the settings'. Raises before anything is written."""
    validate_workflow_type(workflow_type)
    definition = get_workflow(workflow_type)
    check_startable(workflow_type)
    queue = definition.queue if queue is None else queue
    priority = definition.priority if priority is None else priority
    if max_retries is None:
        max_retries = conf.DEFAULT_MAX_RETRIES if definition.max_retries is None else definition.max_retries
    validate_options(idempotency_key=idempotency_key, queue=queue, priority=priority, max_retries=max_retries)
    if run_after is not None:
        run_after = moments.given(run_after, "run_after")
    limit = validate_timeout(definition.timeout if timeout is None else timeout)
    options = dict(
        workflow_type=workflow_type,
        deadline=clock.now() + limit if limit is not None else None,
        timeout=limit,
        run_after=run_after,
        queue=queue,
        priority=priority,
        max_retries=max_retries,
    )
    stored_tags = validate_tags(tags)
    if stored_tags is not None:  # named only when given: an untagged start's statement is the one it was
        options["tags"] = json.dumps(stored_tags)
    caller = tracing.caller_context()
    if caller is not None:  # the run's spans join the caller's trace
        options["trace_context"] = json.dumps(caller)
    return options


__all__ = [
    "cancel_workflow",
    "check_input",
    "pause_workflow",
    "requeue_stuck",
    "restart_workflow",
    "resume_workflow",
    "retry_from_step",
    "retry_workflow",
    "send_event",
    "skip_step",
    "start_workflow",
    "start_workflows",
]

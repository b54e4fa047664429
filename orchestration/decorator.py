"""``@workflow``: declare a function a workflow type, and start runs of it.

Imported by ``orchestration/__init__`` and by every ``workflows.py``, before
Django's models are ready: it imports nothing that loads them, and the API it
starts runs with is imported when a run is started.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from django.core.exceptions import ImproperlyConfigured

from .errors import InvalidWorkflowInput
from .inputs import check_schema
from .registry import WorkflowDefinition, WorkflowFunction, register
from .schedules import check_scheduled_input, validate_schedule
from .validation import validate_step_timeout, validate_timeout

if TYPE_CHECKING:
    from .models import Workflow


class DeclaredWorkflow(WorkflowDefinition):
    """What ``@workflow`` returns: the registered definition, callable as the
    function, with ``start`` to enqueue a run."""

    def start(
        self,
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
        """Start a run of this workflow; see ``orchestration.start_workflow``."""
        from .api import start_workflow

        return start_workflow(
            self.name,
            input_data,
            idempotency_key=idempotency_key,
            run_after=run_after,
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            timeout=timeout,
            concurrency_key=concurrency_key,
            unique_while_active=unique_while_active,
            debounce=debounce,
            tags=tags,
        )


@overload
def workflow(name: WorkflowFunction, /) -> DeclaredWorkflow: ...
@overload
def workflow(
    name: str | None = None,
    /,
    *,
    max_retries: int | None = None,
    queue: str = "default",
    priority: int = 0,
    timeout: float | datetime.timedelta | None = None,
    schedule: str | None = None,
    step_timeout: float | datetime.timedelta | None = None,
    concurrency_key: Callable[[Any], Any] | None = None,
    input: Callable[[Any], Any] | None = None,
) -> Callable[[WorkflowFunction], DeclaredWorkflow]: ...


def workflow(
    name: str | WorkflowFunction | None = None,
    /,
    *,
    max_retries: int | None = None,
    queue: str = "default",
    priority: int = 0,
    timeout: float | datetime.timedelta | None = None,
    schedule: str | None = None,
    step_timeout: float | datetime.timedelta | None = None,
    concurrency_key: Callable[[Any], Any] | None = None,
    input: Callable[[Any], Any] | None = None,
) -> DeclaredWorkflow | Callable[[WorkflowFunction], DeclaredWorkflow]:
    """Register a function ``fn(ctx, data)`` as a workflow type.

    ``@workflow("order_fulfilment", max_retries=3)``; the name defaults to the
    function's name, so a bare ``@workflow`` works too. ``timeout`` (seconds or
    a timedelta) cancels a run still going that long after it was started;
    ``schedule`` (a cron expression, optionally with a sixth field for seconds)
    starts one run per tick. ``step_timeout`` (seconds or a timedelta) is the
    time limit of each ``ctx.step`` that does not pass its own ``timeout=``.
    ``concurrency_key`` is a function of the input
    that gives a run's key (``"customer-42"``, or None) when its start gives
    none; the queue's per-key limits count runs by it. ``input`` declares what
    a run takes: a pydantic model, or a function that raises ``ValueError``
    (or ``TypeError``, ``KeyError``, Django's ``ValidationError``) on bad input
    and returns what the workflow function is given (None: the input as is).
    Every start checks it before anything is written (``InvalidWorkflowInput``
    naming the field); the function receives the model instance, the stored
    input stays JSON.
    """
    if callable(name):
        return workflow()(name)
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ImproperlyConfigured(f"@workflow max_retries must be an integer >= 0, not {max_retries!r}")
    try:
        limit = validate_timeout(timeout)
        step_limit = None
        if step_timeout is not None:
            step_limit = datetime.timedelta(seconds=validate_step_timeout(step_timeout, "step_timeout"))
    except InvalidWorkflowInput as exc:
        raise ImproperlyConfigured(f"@workflow {exc}") from None
    if schedule is not None:
        validate_schedule(schedule)
    schema = check_schema(input)
    if concurrency_key is not None and not callable(concurrency_key):
        raise ImproperlyConfigured(
            f"@workflow concurrency_key must be a function of the input, not {concurrency_key!r}"
        )

    def declare(function: WorkflowFunction) -> DeclaredWorkflow:
        definition = DeclaredWorkflow(
            name=name or function.__name__,
            function=function,
            max_retries=max_retries,
            queue=queue,
            priority=priority,
            timeout=limit,
            schedule=schedule,
            step_timeout=step_limit,
            concurrency_key=concurrency_key,
            input_schema=schema,
        )
        if schedule is not None and (schema is not None or concurrency_key is not None):
            check_scheduled_input(definition)
        register(definition)
        return definition

    return declare

"""The ``@workflow`` decorator and the registry of workflow types.

Workflows are registered when their module is imported; Django imports every
installed app's ``workflows.py`` at start-up (see ``apps.py``), so workers and
web processes know the same types.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from django.core.exceptions import ImproperlyConfigured

from .errors import UnknownWorkflowType

if TYPE_CHECKING:
    from .context import WorkflowContext
    from .models import Workflow

WorkflowFunction = Callable[["WorkflowContext", Any], Any]

_registry: dict[str, WorkflowDefinition] = {}
_queue_sources: list[Callable[[], Iterable[str]]] = []


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    function: WorkflowFunction
    max_retries: int | None = None
    queue: str = "default"
    priority: int = 0
    #: Default time limit of a run, from its start; past it the run is cancelled.
    timeout: datetime.timedelta | None = None
    #: Cron expression: one run is started per tick (see ``orchestration.schedules``).
    schedule: str | None = None

    def __call__(self, ctx: WorkflowContext, data: Any) -> Any:
        return self.function(ctx, data)

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
        )


@overload
def workflow(name: WorkflowFunction, /) -> WorkflowDefinition: ...
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
) -> Callable[[WorkflowFunction], WorkflowDefinition]: ...


def workflow(
    name: str | WorkflowFunction | None = None,
    /,
    *,
    max_retries: int | None = None,
    queue: str = "default",
    priority: int = 0,
    timeout: float | datetime.timedelta | None = None,
    schedule: str | None = None,
) -> WorkflowDefinition | Callable[[WorkflowFunction], WorkflowDefinition]:
    """Register a function ``fn(ctx, data)`` as a workflow type.

    ``@workflow("order_fulfilment", max_retries=3)``; the name defaults to the
    function's name, so a bare ``@workflow`` works too. ``timeout`` (seconds or
    a timedelta) cancels a run still going that long after it was started;
    ``schedule`` (a cron expression, optionally with a sixth field for seconds)
    starts one run per tick.
    """
    if callable(name):
        return workflow()(name)
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ImproperlyConfigured(f"@workflow max_retries must be an integer >= 0, not {max_retries!r}")
    from .validation import InvalidWorkflowInput, validate_timeout

    try:
        limit = validate_timeout(timeout)
    except InvalidWorkflowInput as exc:
        raise ImproperlyConfigured(f"@workflow {exc}") from None
    if schedule is not None:
        from .schedules import validate_schedule

        validate_schedule(schedule)

    def register(function: WorkflowFunction) -> WorkflowDefinition:
        definition = WorkflowDefinition(
            name=name or function.__name__,
            function=function,
            max_retries=max_retries,
            queue=queue,
            priority=priority,
            timeout=limit,
            schedule=schedule,
        )
        _register(definition)
        return definition

    return register


def _register(definition: WorkflowDefinition) -> None:
    from .validation import validate_workflow_type

    validate_workflow_type(definition.name)
    existing = _registry.get(definition.name)
    if existing is not None and _qualified_name(existing.function) != _qualified_name(definition.function):
        raise ImproperlyConfigured(
            f"Workflow type {definition.name!r} is registered twice: by "
            f"{_qualified_name(existing.function)} and {_qualified_name(definition.function)}."
        )
    _registry[definition.name] = definition


def _qualified_name(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def get_workflow(name: str) -> WorkflowDefinition:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownWorkflowType(
            f"Unknown workflow type {name!r}: no installed app registers it "
            f"(known: {', '.join(sorted(_registry)) or 'none'})."
        ) from None


def add_queue_source(source: Callable[[], Iterable[str]]) -> None:
    """Let something besides ``@workflow`` put work on queues (the Tasks backend
    adds its ``TASKS[...]["QUEUES"]``); ``source`` is called on each lookup."""
    if source not in _queue_sources:
        _queue_sources.append(source)


def known_queues() -> set[str]:
    """Queues that something can put work on: registered workflows', ``QUEUES``
    and those of the queue sources."""
    from .conf import conf

    return {
        "default",
        *conf.QUEUES,
        *(definition.queue for definition in _registry.values()),
        *(queue for source in _queue_sources for queue in source()),
    }


def registered_workflows() -> dict[str, WorkflowDefinition]:
    return dict(_registry)

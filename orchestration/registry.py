"""The registry of workflow types, and of the queues work can be put on.

Workflows are registered when their module is imported (``@workflow``, in
``decorator``); Django imports every installed app's ``workflows.py`` at
start-up (see ``apps.py``), so workers and web processes know the same types.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .errors import InvalidWorkflowInput, UnknownWorkflowType

#: ``fn(ctx, data)``: ctx is a ``context.WorkflowContext``.
WorkflowFunction = Callable[[Any, Any], Any]

_registry: dict[str, WorkflowDefinition] = {}
_queue_sources: list[Callable[[], Iterable[str]]] = []
#: Types whose runs only their own front door makes (``django.tasks``: the Tasks
#: backend, which checks the task): ``start_workflow`` and its kin refuse them.
_reserved: dict[str, str] = {}
_opened: ContextVar[str | None] = ContextVar("orchestration_reserved_start", default=None)


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
    #: Default time limit of each ``ctx.step`` (see ``WorkflowContext.step``).
    step_timeout: datetime.timedelta | None = None
    #: ``fn(input)`` -> the run's ``concurrency_key`` (None: no key) when a start gives none.
    concurrency_key: Callable[[Any], Any] | None = None
    #: ``@workflow(input=...)``: a pydantic model or a function that checks the input (see ``inputs``).
    input_schema: Callable[[Any], Any] | None = None

    def __call__(self, ctx: Any, data: Any) -> Any:
        return self.function(ctx, data)

    def argument(self, data: Any, where: str = "The input") -> Any:
        """What the workflow function is given for the stored input ``data``:
        ``data`` itself, or what the declared schema makes of it (raises
        ``InvalidWorkflowInput`` naming the field at fault)."""
        if self.input_schema is None:
            return data
        from .inputs import validated

        return validated(self.name, self.input_schema, data, where)

    @functools.cached_property
    def is_async(self) -> bool:
        """An ``async def`` workflow: run in an event loop (``async_context``), its
        ``ctx`` an ``AsyncWorkflowContext``. Read once: the sync path pays one attribute read."""
        return inspect.iscoroutinefunction(self.function)


def register(definition: WorkflowDefinition) -> None:
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


def find_workflow(name: str) -> WorkflowDefinition | None:
    """The registered workflow ``name``, or None when this process does not register it."""
    return _registry.get(name)


def async_workflow_types() -> frozenset[str]:
    """The names of the registered ``async def`` workflows."""
    return frozenset(name for name, definition in _registry.items() if definition.is_async)


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


def reserve(name: str, front_door: str) -> None:
    """Let only code inside ``starting_reserved(name)`` start runs of ``name``;
    ``front_door`` says where they are made, for the refusal's message."""
    _reserved[name] = front_door


@contextlib.contextmanager
def starting_reserved(name: str) -> Iterator[None]:
    """Within it, this context (thread or task) may start runs of the reserved ``name``."""
    token = _opened.set(name)
    try:
        yield
    finally:
        _opened.reset(token)


def check_startable(name: str) -> None:
    """Raise ``InvalidWorkflowInput`` for a reserved type started outside its front door."""
    if name in _reserved and _opened.get() != name:
        raise InvalidWorkflowInput(
            f"Workflow type {name!r} is reserved: its runs are made by {_reserved[name]} only, "
            "which checks what they will run."
        )

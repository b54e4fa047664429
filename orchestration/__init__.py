"""Durable, multi-step workflows for Django, persisted in PostgreSQL.

Importing this package loads no models, so it is safe in settings and in
``workflows.py`` modules; the API functions are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .decorator import workflow
from .errors import (
    ChildWorkflowFailed,
    DeadlineExceeded,
    EventTimeout,
    InvalidQueueLimit,
    InvalidSchedule,
    InvalidTransition,
    InvalidWorkflowInput,
    NonDeterministicWorkflow,
    OrchestrationError,
    PermanentError,
    StepTimeout,
    UnknownQueue,
    UnknownSchedule,
    UnknownWorkflowType,
    WorkflowCancelled,
    WorkflowFailed,
)

#: The package's version, its one place: pyproject.toml reads it (setuptools' dynamic version).
__version__ = "0.2.0.dev0"

if TYPE_CHECKING:
    from .api import (
        cancel_workflow,
        pause_workflow,
        restart_workflow,
        resume_workflow,
        retry_workflow,
        send_event,
        start_workflow,
        start_workflows,
    )
    from .async_api import asend_event, astart_workflow, astart_workflows
    from .ctx.async_context import AsyncWorkflowContext
    from .ctx.children import ChildHandle
    from .ctx.context import WorkflowContext
    from .flow import pause_queue, resume_queue, set_queue_limits
    from .forks import fork_workflow
    from .results import aget_result, wait_for_result
    from .schedules.api import pause_schedule, resume_schedule, schedule

_LAZY = {
    "start_workflow": "api",
    "start_workflows": "api",
    "retry_workflow": "api",
    "restart_workflow": "api",
    "cancel_workflow": "api",
    "pause_workflow": "api",
    "resume_workflow": "api",
    "send_event": "api",
    "fork_workflow": "forks",
    "astart_workflow": "async_api",
    "astart_workflows": "async_api",
    "asend_event": "async_api",
    "wait_for_result": "results",
    "aget_result": "results",
    "set_queue_limits": "flow",
    "pause_queue": "flow",
    "resume_queue": "flow",
    "schedule": "schedules.api",
    "pause_schedule": "schedules.api",
    "resume_schedule": "schedules.api",
    "WorkflowContext": "ctx.context",
    "AsyncWorkflowContext": "ctx.async_context",
    "ChildHandle": "ctx.children",
}

__all__ = [
    "AsyncWorkflowContext",
    "ChildHandle",
    "ChildWorkflowFailed",
    "DeadlineExceeded",
    "EventTimeout",
    "InvalidQueueLimit",
    "InvalidSchedule",
    "InvalidTransition",
    "InvalidWorkflowInput",
    "NonDeterministicWorkflow",
    "OrchestrationError",
    "PermanentError",
    "StepTimeout",
    "UnknownQueue",
    "UnknownSchedule",
    "UnknownWorkflowType",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "aget_result",
    "asend_event",
    "astart_workflow",
    "astart_workflows",
    "cancel_workflow",
    "fork_workflow",
    "pause_queue",
    "pause_schedule",
    "pause_workflow",
    "restart_workflow",
    "resume_queue",
    "resume_schedule",
    "resume_workflow",
    "retry_workflow",
    "schedule",
    "send_event",
    "set_queue_limits",
    "start_workflow",
    "start_workflows",
    "wait_for_result",
    "workflow",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

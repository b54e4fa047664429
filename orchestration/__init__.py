"""Durable, multi-step workflows for Django, persisted in PostgreSQL.

Importing this package loads no models, so it is safe in settings and in
``workflows.py`` modules; the API functions are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    InvalidTransition,
    InvalidWorkflowInput,
    NonDeterministicWorkflow,
    OrchestrationError,
    PermanentError,
    UnknownWorkflowType,
    WorkflowCancelled,
)
from .registry import workflow

if TYPE_CHECKING:
    from .api import cancel_workflow, restart_workflow, retry_workflow, start_workflow
    from .context import WorkflowContext

_LAZY = {
    "start_workflow": "api",
    "retry_workflow": "api",
    "restart_workflow": "api",
    "cancel_workflow": "api",
    "WorkflowContext": "context",
}

__all__ = [
    "InvalidTransition",
    "InvalidWorkflowInput",
    "NonDeterministicWorkflow",
    "OrchestrationError",
    "PermanentError",
    "UnknownWorkflowType",
    "WorkflowCancelled",
    "WorkflowContext",
    "cancel_workflow",
    "restart_workflow",
    "retry_workflow",
    "start_workflow",
    "workflow",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

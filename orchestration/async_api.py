"""The API for async code (async views, ASGI consumers): starting runs and
sending events, with Django's ``a`` prefix.

They write through Django's database connection, which is synchronous, so they
run in Django's thread for sync work as the async ORM's methods do
(``sync_to_async``); a transaction cannot span them. Awaiting a result holds no
thread at all: see ``results.aget_result``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async

from .api import send_event, start_workflow, start_workflows
from .models import Workflow, WorkflowEvent
from .transitions import WorkflowRef

# Wrapped once, not at each call: making a wrapper costs 10-30 µs, a good part of a start's own Python.
_start_workflow = sync_to_async(start_workflow)
_start_workflows = sync_to_async(start_workflows)
_send_event = sync_to_async(send_event)


async def astart_workflow(workflow_type: str, input_data: Any = None, **options: Any) -> Workflow:
    """``start_workflow`` for async code; the same options, the same errors."""
    return await _start_workflow(workflow_type, input_data, **options)


async def astart_workflows(workflow_type: str, inputs: Iterable[Any], **options: Any) -> list[Workflow]:
    """``start_workflows`` for async code: one statement for every run."""
    return await _start_workflows(workflow_type, list(inputs), **options)


async def asend_event(workflow: WorkflowRef, name: str, payload: Any = None) -> WorkflowEvent:
    """``send_event`` for async code."""
    return await _send_event(workflow, name, payload)

"""``@task`` functions for the tests of the Tasks backend (Django >= 6.0 only).

Worker subprocesses import them by their module path, like a project's tasks.
"""

from __future__ import annotations

import os
from typing import Any

from django.tasks import TaskContext, task

from orchestration import PermanentError

from .models import StepRun


class Declined(Exception):
    """A task's own exception class, reported by its import path."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def async_add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def remember(context: TaskContext, label: str) -> dict[str, Any]:
    """Records each run (committed at once), so tests can see the order of runs."""
    StepRun.objects.create(
        workflow_id=context.task_result.id, step_number=context.attempt, label=label, pid=os.getpid()
    )
    return {
        "label": label,
        "id": context.task_result.id,
        "attempt": context.attempt,
        "status": context.task_result.status,
        "queue": context.task_result.task.queue_name,
        "priority": context.task_result.task.priority,
    }


@task
def decline(reason: str) -> None:
    raise Declined(reason)


@task
def decline_permanently(reason: str) -> None:
    raise PermanentError(reason)


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> dict[str, int]:
    if context.attempt < succeed_on:
        raise ConnectionError(f"flaky failure on attempt {context.attempt}")
    return {"attempt": context.attempt}


@task
def returns_a_set() -> Any:
    return {1, 2, 3}


@task
def returns_awkward() -> dict[str, Any]:
    """What jsonb stores otherwise than Python wrote it: key order, 1e16, -0.0."""
    return {"zeta": 1, "b": 1e16, "aa": -0.0}

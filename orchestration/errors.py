"""The exceptions of the public API, and the engine's control flow.

Each class's docstring is its default message, so ``raise PermanentError`` and
``raise PermanentError("card declined")`` both explain themselves.

The errors (``OrchestrationError`` and its subclasses) are ``Exception`` subclasses.
The signals the engine raises inside a workflow function to unwind it (a wait,
a release at shutdown, a lost or cancelled run, a passed deadline) are
``ControlFlow``, a ``BaseException`` as asyncio's ``CancelledError`` is: a
workflow's ``except Exception:`` cannot swallow them and carry on past a
``ctx.sleep`` or a cancellation.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any


class OrchestrationError(Exception):
    """A workflow orchestration error."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        super().__init__(message or (self.__doc__ or "").strip(), *args)


class PermanentError(OrchestrationError):
    """The step failed permanently; the workflow fails without retries."""


class UnknownWorkflowType(OrchestrationError, LookupError):
    """No installed app registers this workflow type."""


class NonDeterministicWorkflow(OrchestrationError):
    """The workflow's replay called a different step than the one recorded."""


class WorkflowCancelled(OrchestrationError):
    """The workflow was cancelled."""

    # An error for callers, about a run that ended cancelled; raised inside a
    # workflow function (by code waiting for another run) it is an ordinary
    # failure. The engine stops the cancelled run itself with ``RunCancelled``.


class WorkflowFailed(OrchestrationError):
    """The workflow failed."""

    # Raised to a caller waiting for a run that failed (``wait_for_result``);
    # ``error_message`` is the run's own, as the admin shows it.
    def __init__(self, message: str | None = None, *, workflow_id: Any = None, error_message: str | None = None):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.error_message = error_message


class InvalidWorkflowInput(OrchestrationError, ValueError):
    """The workflow's input or options are invalid."""


class UnknownQueue(OrchestrationError, LookupError):
    """No workflow, setting or queue source names this queue."""


class InvalidQueueLimit(OrchestrationError, ValueError):
    """A queue's limit is invalid: a whole number above 0, a rate such as "100/m", or None."""


class InvalidSchedule(OrchestrationError, ValueError):
    """The schedule is invalid: its cron expression, time zone, name or a backfill's range."""


class UnknownSchedule(OrchestrationError, LookupError):
    """No schedule has this name."""


class InvalidTransition(OrchestrationError):
    """The workflow is not in a state that allows this change."""


class EventTimeout(PermanentError):
    """No event arrived before the wait's timeout."""


class ChildWorkflowFailed(PermanentError):
    """A child workflow failed or was cancelled."""

    # Raised by ``ctx.wait_for`` (or returned in its list, with ``return_exceptions``):
    # which child, of which type, and how it ended ("failed", "cancelled", or
    # "deleted" for a row gone while its parent waited).
    def __init__(
        self,
        message: str | None = None,
        *,
        workflow_id: Any = None,
        workflow_type: str | None = None,
        status: str | None = None,
    ):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.status = status


class CheckpointRefused(PermanentError):
    """The database refused to store a step's result; the step is failed."""


class StepTimeout(OrchestrationError, TimeoutError):
    """The step did not return within its timeout; its body was abandoned."""


# -- control flow inside a workflow function: raised by ``ctx``, caught by the worker --


class ControlFlow(BaseException):
    """The engine unwinds the workflow function (not an error of the workflow).

    A ``BaseException``, so that ``except Exception:`` in workflow code lets it
    through; code that catches ``BaseException`` must re-raise it."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        super().__init__(message or (self.__doc__ or "").strip().splitlines()[0], *args)


class LeaseLost(ControlFlow):
    """This worker no longer holds the workflow; it must write nothing more."""


class RunCancelled(LeaseLost):
    """The workflow was cancelled while this worker ran it; it must write nothing more."""


class RunPaused(LeaseLost):
    """The workflow was paused while this worker ran it; it gives the run back at this step boundary."""


class NotRegisteredHere(ControlFlow):
    """This worker does not register the run's workflow type: the run waits for a worker that does."""


class DeadlineExceeded(ControlFlow):
    """The workflow is past its deadline; it is cancelled."""


class ReleaseRequested(ControlFlow):
    """The worker is shutting down: give the workflow back at this step boundary."""


class Suspend(ControlFlow):
    """The workflow waits: release it to pending until ``until`` or a wake-up.

    Raised by the waiting primitives and caught by the worker, so a waiting
    workflow holds no thread and no connection. ``arm()``, run first in the
    transaction that releases it (before its row is taken), prepares what will
    wake it; ``ready()``, checked after the release in the same transaction,
    says the wake-up already happened.
    """

    # ``wait`` is a ``waits.Wait``, not imported even for typing: errors import
    # nothing of the package (waits imports the models, and they wait for results).
    def __init__(
        self,
        until: datetime.datetime | None,
        wait: Any,
        ready: Callable[[], bool] | None = None,
        arm: Callable[[], None] | None = None,
    ):
        super().__init__(wait.text)
        self.until = until
        self.wait = wait
        self.ready = ready
        self.arm = arm


#: Errors that fail the workflow at once: retrying cannot fix them.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    PermanentError,
    UnknownWorkflowType,
    NonDeterministicWorkflow,
    InvalidWorkflowInput,
)


def class_path(cls: type) -> str:
    """The dotted path of ``cls`` (``module.QualName``), as a failed run keeps it."""
    return f"{cls.__module__}.{cls.__qualname__}"

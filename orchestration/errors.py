"""The exceptions of the public API.

Each class's docstring is its default message, so ``raise PermanentError`` and
``raise PermanentError("card declined")`` both explain themselves.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError

if TYPE_CHECKING:
    from .waits import Wait


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


class InvalidWorkflowInput(OrchestrationError, ValueError):
    """The workflow's input or options are invalid."""


class UnknownQueue(OrchestrationError, LookupError):
    """No workflow, setting or queue source names this queue."""


class InvalidQueueLimit(OrchestrationError, ValueError):
    """A queue's limit is invalid: a whole number above 0, a rate such as "100/m", or None."""


class InvalidTransition(OrchestrationError):
    """The workflow is not in a state that allows this change."""


class LeaseLost(OrchestrationError):
    """This worker no longer holds the workflow; it must write nothing more."""


class EventTimeout(PermanentError):
    """No event arrived before the wait's timeout."""


class ChildWorkflowFailed(PermanentError):
    """A child workflow failed or was cancelled."""


class DeadlineExceeded(OrchestrationError):
    """The workflow is past its deadline; it is cancelled at this step boundary."""


# -- control flow inside a workflow function: raised by ``ctx``, caught by the worker --


class ReleaseRequested(Exception):
    """The worker is shutting down: give the workflow back at this step boundary."""


class Suspend(Exception):
    """The workflow waits: release it to pending until ``until`` or a wake-up.

    Raised by the waiting primitives and caught by the worker, so a waiting
    workflow holds no thread and no connection. ``ready()``, checked after the
    release in the same transaction, says the wake-up already happened.
    """

    def __init__(self, until: datetime.datetime | None, wait: Wait, ready: Callable[[], bool] | None = None):
        super().__init__(wait.text)
        self.until = until
        self.wait = wait
        self.ready = ready


#: Errors that fail the workflow at once: retrying cannot fix them.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    PermanentError,
    UnknownWorkflowType,
    NonDeterministicWorkflow,
    InvalidWorkflowInput,
)

#: Errors that mean "the database went away", not "this workflow is broken".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

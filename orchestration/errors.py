"""The exceptions of the public API.

Each class's docstring is its default message, so ``raise PermanentError`` and
``raise PermanentError("card declined")`` both explain themselves.
"""

from __future__ import annotations

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


class InvalidWorkflowInput(OrchestrationError, ValueError):
    """The workflow's input or options are invalid."""


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

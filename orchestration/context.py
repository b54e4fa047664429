"""``ctx``: what a workflow function receives, and where steps are replayed or run."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from . import queue
from .errors import LeaseLost, NonDeterministicWorkflow
from .models import StepStatus
from .validation import to_json_value, validate_step_name

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ReleaseRequested(Exception):
    """The worker is shutting down: give the workflow back at this step boundary."""


class WorkflowContext:
    """Passed to every workflow function as ``ctx``.

    Steps are numbered 1, 2, 3 ... in call order. A step recorded as completed
    returns its stored output without running; any other step runs, and its
    JSON result is checkpointed before the next step starts.
    """

    def __init__(
        self,
        run: queue.ClaimedRun,
        recorded: dict[int, queue.RecordedStep],
        *,
        should_release: Callable[[], bool] = lambda: False,
        durable: Callable[[Callable[[], T]], T] | None = None,
    ) -> None:
        self._run = run
        self._recorded = recorded
        self._should_release = should_release
        self._durable: Callable[[Callable[[], Any]], Any] = durable or (lambda write: write())
        self._next_number = 1
        #: ``(number, name)`` of the step whose body raised, for the failure message.
        self.failed_step: tuple[int, str] | None = None

    @property
    def workflow_id(self) -> uuid.UUID:
        return self._run.id

    @property
    def workflow_type(self) -> str:
        return self._run.workflow_type

    @property
    def attempt(self) -> int:
        """1 on the first attempt, 2 on the first retry, and so on."""
        return self._run.attempts

    @property
    def input(self) -> Any:
        return self._run.input_data

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once and checkpoint its JSON result.

        On replay a completed step returns the stored result without running.
        The body runs at least once (again, if the worker died before the
        checkpoint was written); the checkpoint is written exactly once.
        """
        validate_step_name(name)
        number = self._next_number
        self._next_number += 1
        recorded = self._recorded.get(number)
        if recorded is not None and recorded.name != name:
            raise NonDeterministicWorkflow(
                f"Non-deterministic workflow: step {number} was recorded as {recorded.name!r}, "
                f"but this run called {name!r} there. Workflow code must call the same steps in the "
                "same order on every run; restart the workflow to run it from scratch."
            )
        if recorded is not None and recorded.status == StepStatus.COMPLETED:
            return recorded.output

        self._check_boundary()
        run = self._run
        self._durable(lambda: queue.start_step(run, number, name))
        started = time.monotonic()
        try:
            output = to_json_value(fn(*args, **kwargs), f"The result of step {number} {name!r}")
        except Exception as exc:
            self.failed_step = (number, name)
            message = f"{type(exc).__name__}: {exc}"
            self._durable(lambda: queue.fail_step(run, number, message))
            logger.info(
                'workflow %s (%s) step %d "%s" failed after %.3fs: %s',
                run.id,
                run.workflow_type,
                number,
                name,
                time.monotonic() - started,
                message,
            )
            raise
        self._durable(lambda: queue.complete_step(run, number, output))
        self._recorded[number] = queue.RecordedStep(number, name, StepStatus.COMPLETED, output)
        logger.info(
            'workflow %s (%s) step %d "%s" completed in %.3fs',
            run.id,
            run.workflow_type,
            number,
            name,
            time.monotonic() - started,
        )
        return output

    def _check_boundary(self) -> None:
        if self._run.lost.is_set():
            raise LeaseLost(f"Workflow {self._run.id} is no longer held by this worker.")
        if self._should_release():
            raise ReleaseRequested()

"""Running one claimed attempt of a workflow, and writing its outcome.

Nothing a workflow does escapes ``execute``: its result, its failure, a wait,
a release at shutdown or a passed deadline each end in one fenced write of the
lease, and a lease found lost ends it with nothing more written.
"""

from __future__ import annotations

import enum
import json
import logging
import time
import traceback
from collections.abc import Callable

from django.utils import timezone

from .. import async_context, logs, observe
from ..async_context import AsyncWorkflowContext
from ..claims import FinishedRun
from ..context import WorkflowContext
from ..errors import (
    PERMANENT_ERRORS,
    CheckpointRefused,
    DeadlineExceeded,
    LeaseLost,
    ReleaseRequested,
    Suspend,
)
from ..lease import Lease
from ..registry import get_workflow
from ..validation import to_json_text

logger = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    #: Handed to ``finish_later``: its completion is written with the next claim.
    FINISHING = "finishing"
    RETRYING = "retrying"
    FAILED = "failed"
    WAITING = "waiting"
    RELEASED = "released"
    CANCELLED = "cancelled"
    #: The lease was lost or the workflow cancelled: nothing more was written.
    ABANDONED = "abandoned"


@observe.attempt
def execute(
    run: Lease,
    *,
    should_release: Callable[[], bool] = lambda: False,
    finish_later: Callable[[FinishedRun], None] | None = None,
) -> Outcome:
    """Run one claimed attempt of a workflow and record its outcome.

    With ``finish_later``, a run that returned and has no parent to wake is
    handed to it instead of being completed here (``Outcome.FINISHING``).
    Never raises for anything the workflow does: any ``BaseException`` it
    raises (``KeyboardInterrupt``, ``SystemExit`` ...) fails the attempt like
    an error, and the engine's control flow ends it as it says.
    """
    started = time.monotonic()
    ctx: WorkflowContext | None = None
    try:
        if run.deadline is not None and timezone.now() >= run.deadline:
            raise DeadlineExceeded()
        definition = get_workflow(run.workflow_type)
        context = AsyncWorkflowContext if definition.is_async else WorkflowContext
        ctx = context(run, run.recorded_steps(), should_release=should_release, step_timeout=definition.step_timeout)
        argument = definition.argument(run.input_data)
        if definition.is_async:
            result = async_context.run(definition.function, ctx, argument)
        else:
            result = definition.function(ctx, argument)
        encoded = to_json_text(result, f"The return value of workflow {run.workflow_type!r}")
        if finish_later is not None and run.parent_id is None and run.placeholder is None:
            finish_later(FinishedRun(run, encoded, started))
            return Outcome.FINISHING
        run.complete(json.loads(encoded))  # as jsonb will read it back
    except LeaseLost as exc:  # RunCancelled too
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, exc)
        return Outcome.ABANDONED
    except ReleaseRequested:
        return _settle(run, run.release, Outcome.RELEASED, "released to pending for shutdown")
    except Suspend as suspended:
        until, wait, ready = suspended.until, suspended.wait, suspended.ready
        return _settle(run, lambda: run.suspend(until, wait, ready), Outcome.WAITING, f"waiting for {wait.text}")
    except DeadlineExceeded:
        return _settle(run, run.cancel_past_deadline, Outcome.CANCELLED, "cancelled: deadline")
    except BaseException as exc:  # the engine's own (ControlFlow) are all caught above
        return record_failure(run, ctx, exc, time.monotonic() - started)
    log_completed(run, started)
    return Outcome.COMPLETED


def log_completed(run: Lease, started: float) -> None:
    logs.info(
        logger,
        "workflow %s (%s) completed in %.3fs (attempt %d)",
        run.id,
        run.workflow_type,
        time.monotonic() - started,
        run.attempts,
    )


def _settle(run: Lease, write: Callable[[], object], outcome: Outcome, description: str) -> Outcome:
    """Write a non-failure outcome (release, wait, deadline) if the lease still holds."""
    try:
        write()
    except LeaseLost:
        return Outcome.ABANDONED
    logger.info("workflow %s (%s) %s", run.id, run.workflow_type, description)
    return outcome


def record_failure(run: Lease, ctx: WorkflowContext | None, exc: BaseException, elapsed: float) -> Outcome:
    """Fail the attempt with ``exc``: retried later while attempts remain, unless retrying cannot fix it."""
    message = f"{type(exc).__name__}: {exc}"
    if ctx is not None and ctx.failed_step is not None:
        number, name = ctx.failed_step
        message = f'Step {number} "{name}" failed: {message}'
    details = "".join(traceback.format_exception(exc))
    retryable = not isinstance(exc, PERMANENT_ERRORS)
    try:
        try:
            delay = run.fail(message, details, retryable=retryable)
        except CheckpointRefused as refused:  # the step before it could not be stored: that fails the run
            message = str(refused)
            delay = run.fail(message, details, retryable=False)
    except LeaseLost as lost:
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, lost)
        return Outcome.ABANDONED
    if delay is not None:
        logger.warning(
            "workflow %s (%s) attempt %d of %d failed after %.3fs, retrying in %.1fs: %s",
            run.id,
            run.workflow_type,
            run.attempts,
            run.max_retries + 1,
            elapsed,
            delay,
            message,
        )
        return Outcome.RETRYING
    logger.error(
        "workflow %s (%s) failed after %.3fs (attempt %d of %d): %s",
        run.id,
        run.workflow_type,
        elapsed,
        run.attempts,
        run.max_retries + 1,
        message,
    )
    return Outcome.FAILED

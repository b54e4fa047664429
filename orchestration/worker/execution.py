"""Running one claimed attempt of a workflow, and writing its outcome.

Nothing a workflow does escapes ``execute``: its result, its failure, a wait,
a release at shutdown or a passed deadline each end in one fenced write of the
lease, and a lease found lost ends it with nothing more written. A run found
paused is given back (``Lease.give_back_paused``) with the checkpoint of the
step it had finished.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any, cast

from .. import clock, moments
from ..claim.claims import FinishedRun
from ..claim.lease import Lease
from ..ctx import async_context
from ..ctx.async_context import AsyncWorkflowContext
from ..ctx.context import WorkflowContext
from ..errors import (
    PERMANENT_ERRORS,
    CheckpointRefused,
    DeadlineExceeded,
    LeaseLost,
    NotRegisteredHere,
    ReleaseRequested,
    RunPaused,
    Suspend,
    class_path,
)
from ..models import WorkflowStatus
from ..observability import observe
from ..registry import WorkflowDefinition, find_workflow, registered_workflows
from ..terminal import printable
from ..validation import ERROR_MESSAGE_MAX_LENGTH, storable_text, to_json_text
from ..waits import WAIT_FOREVER

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
    #: Paused by an operator while it ran: given back at its step boundary.
    PAUSED = "paused"
    #: The lease was lost or the workflow cancelled: nothing more was written.
    ABANDONED = "abandoned"
    #: Given back untouched: this worker does not register its type.
    NOT_REGISTERED_HERE = "not registered here"


#: The workflow types this process gave back for not registering them: each is logged once.
_unregistered_types_seen: set[str] = set()


@observe.attempt
def execute(
    run: Lease,
    *,
    should_release: Callable[[], bool] = lambda: False,
    finish_later: Callable[[FinishedRun], None] | None = None,
) -> Outcome:
    """Run one claimed attempt of a workflow and record its outcome.

    With ``finish_later``, a run that returned is handed to it instead of
    being completed here (a child counts in its parent's wait there too) (``Outcome.FINISHING``).
    Never raises for anything the workflow does: any ``BaseException`` it
    raises (``KeyboardInterrupt``, ``SystemExit`` ...) fails the attempt like
    an error, and the engine's control flow ends it as it says.
    """
    started = time.monotonic()
    ctx: WorkflowContext | None = None
    try:
        definition, ctx, argument = _prepare(run, should_release)
        if definition.is_async:
            result = async_context.run(definition.function, cast(AsyncWorkflowContext, ctx), argument)
        else:
            result = definition.function(ctx, argument)
        return _returned(run, result, started, finish_later)
    except BaseException as exc:
        return _ended(run, ctx, exc, started)


@observe.attempt
async def execute_async(
    run: Lease,
    *,
    on_thread: async_context.OnThread,
    sync_calls: async_context.SyncCalls,
    should_release: Callable[[], bool] = lambda: False,
) -> Outcome:
    """``execute`` for an async workflow, in a running event loop that it
    shares: every engine call (and sync step body) runs through ``on_thread``,
    off the loop, and its step bodies' own sync calls on ``sync_calls``' thread.
    The run is completed at once, not with a later claim."""
    started = time.monotonic()
    ctx: WorkflowContext | None = None
    try:
        definition, ctx, argument = await on_thread(_prepare)(run, should_release, on_thread, sync_calls)
        result = await async_context.watched(run, definition.function(ctx, argument))
        return cast(Outcome, await on_thread(_returned)(run, result, started, None))
    except BaseException as exc:
        if async_context.cancelled(exc):
            raise  # the loop is closing: the run is released, or reclaimed, as the process's other runs
        return cast(Outcome, await on_thread(_ended)(run, ctx, exc, started))


#: A deadline this near ``clock.now()`` is checked against a new reading of the database's clock.
DEADLINE_NEAR = datetime.timedelta(seconds=1)


def _deadline_passed(deadline: datetime.datetime) -> bool:
    """Whether ``deadline`` has passed, on the database's clock. ``clock.now()``
    may lag it by half a round trip: a run woken at its deadline, which the claim
    judged passed, reads the clock again rather than run its code once more."""
    now = clock.now()
    return now >= deadline or (deadline - now < DEADLINE_NEAR and clock.database_now() >= deadline)


def _prepare(
    run: Lease,
    should_release: Callable[[], bool],
    on_thread: async_context.OnThread | None = None,
    sync_calls: async_context.SyncCalls | None = None,
) -> tuple[WorkflowDefinition, WorkflowContext, Any]:
    """The run's definition, its ``ctx`` (async ones given ``on_thread``) and its argument."""
    if run.deadline is not None and _deadline_passed(run.deadline):
        raise DeadlineExceeded()
    definition = find_workflow(run.workflow_type)
    if definition is None:
        raise NotRegisteredHere()
    options: dict[str, Any] = {"should_release": should_release, "step_timeout": definition.step_timeout}
    context: type[WorkflowContext] = WorkflowContext
    if definition.is_async:
        context = AsyncWorkflowContext
        if on_thread is not None:
            options["on_thread"] = on_thread
            options["sync_calls"] = sync_calls
    ctx = context(run, run.recorded_steps(), **options)
    return definition, ctx, definition.argument(run.input_data)


def _returned(run: Lease, result: Any, started: float, finish_later: Callable[[FinishedRun], None] | None) -> Outcome:
    """Complete a run whose function returned ``result`` (or hand it to ``finish_later``)."""
    encoded = to_json_text(result, lambda: f"The return value of workflow {run.workflow_type!r}")
    if finish_later is not None and run.placeholder is None:
        finish_later(FinishedRun(run, encoded, started))  # its last report goes with its batch (claims)
        return Outcome.FINISHING
    if run.progress is not None:  # its last report, before the run ends
        run.write_progress()
    run.complete(json.loads(encoded))  # as jsonb will read it back
    log_completed(run, started)
    return Outcome.COMPLETED


def _ended(run: Lease, ctx: WorkflowContext | None, exc: BaseException, started: float) -> Outcome:
    """Write the outcome of an attempt that raised ``exc``, as it says."""
    if isinstance(exc, RunPaused):
        return give_back_paused(run)
    if isinstance(exc, LeaseLost):  # RunCancelled too
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, exc)
        return Outcome.ABANDONED
    if run.progress is not None and not isinstance(exc, NotRegisteredHere):
        try:  # the last report lands before the attempt's outcome, as before a step's checkpoint
            run.write_progress()
        except LeaseLost as lost:
            logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, lost)
            return Outcome.ABANDONED
        except Exception as error:  # the outcome matters more: it is written all the same
            logger.warning("workflow %s (%s): writing its progress failed: %s", run.id, run.workflow_type, error)
    if isinstance(exc, ReleaseRequested):
        return _settle(run, run.release, Outcome.RELEASED, "released to pending for shutdown")
    if isinstance(exc, Suspend):
        # No time limit: WAIT_FOREVER, in the form the run's deadline is compared in (USE_TZ).
        until, wait, ready, arm = exc.until or moments.as_django(WAIT_FOREVER), exc.wait, exc.ready, exc.arm
        return _settle(run, lambda: run.suspend(until, wait, ready, arm), Outcome.WAITING, f"waiting for {wait.text}")
    if isinstance(exc, NotRegisteredHere):
        return _give_back_unregistered(run)
    if isinstance(exc, DeadlineExceeded):
        return _settle(run, run.cancel_past_deadline, Outcome.CANCELLED, "cancelled: deadline")
    return record_failure(run, ctx, exc, time.monotonic() - started)  # the engine's own (ControlFlow) are above


def _give_back_unregistered(run: Lease) -> Outcome:
    """A run of a type this process does not register never fails or is
    cancelled for it: in a rolling deploy, a worker of the old code claims
    runs of a type only the new code has. It goes back to pending untouched,
    for a worker that registers the type, and the type is logged once."""
    outcome = _settle(run, run.await_worker, Outcome.NOT_REGISTERED_HERE, "given back: its type is not registered here")
    if outcome == Outcome.NOT_REGISTERED_HERE and run.workflow_type not in _unregistered_types_seen:
        _unregistered_types_seen.add(run.workflow_type)
        logger.warning(
            "workflow %s: this worker does not register workflow type %r, so its runs go back to pending for a "
            "worker that does (a deploy in progress, or code that is missing here); this process registers %s",
            run.id,
            run.workflow_type,
            ", ".join(sorted(registered_workflows())) or "no type",
        )
    return outcome


def log_completed(run: Lease, started: float) -> None:
    logger.info(
        "workflow %s (%s) completed in %.3fs (attempt %d)",
        run.id_text,
        run.workflow_type,
        time.monotonic() - started,
        run.attempts,
    )


def give_back_paused(run: Lease) -> Outcome:
    """Give back a run paused while it ran (see ``Lease.give_back_paused``)."""
    try:
        left = run.give_back_paused()
    except LeaseLost as lost:
        logger.warning("workflow %s (%s) stopped: %s", run.id, run.workflow_type, lost)
        return Outcome.ABANDONED
    if left == WorkflowStatus.PENDING:
        logger.info("workflow %s (%s) resumed while pausing: released to pending", run.id, run.workflow_type)
        return Outcome.RELEASED
    logger.info("workflow %s (%s) paused: given back at its step boundary", run.id, run.workflow_type)
    return Outcome.PAUSED


def _settle(run: Lease, write: Callable[[], object], outcome: Outcome, description: str) -> Outcome:
    """Write a non-failure outcome (release, wait, deadline) if the lease still holds."""
    try:
        write()
    except RunPaused:
        return give_back_paused(run)
    except LeaseLost:
        return Outcome.ABANDONED
    logger.info("workflow %s (%s) %s", run.id, run.workflow_type, printable(description))  # an event's name
    return outcome


def record_failure(run: Lease, ctx: WorkflowContext | None, exc: BaseException, elapsed: float) -> Outcome:
    """Fail the attempt with ``exc``: retried later while attempts remain, unless retrying cannot fix it."""
    message = f"{type(exc).__name__}: {exc}"
    if ctx is not None and ctx.failed_step is not None:
        number, name = ctx.failed_step
        message = f'Step {number} "{name}" failed: {message}'
    message = storable_text(message, ERROR_MESSAGE_MAX_LENGTH)  # what is stored is what is logged
    details = "".join(traceback.format_exception(exc))
    retryable = not isinstance(exc, PERMANENT_ERRORS)
    try:
        try:
            delay = run.fail(message, details, retryable=retryable, error_class=class_path(type(exc)))
        except CheckpointRefused as refused:  # the step before it could not be stored: that fails the run
            message = str(refused)
            delay = run.fail(message, details, retryable=False, error_class=class_path(CheckpointRefused))
    except RunPaused:
        return give_back_paused(run)
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
            printable(message),
        )
        return Outcome.RETRYING
    logger.error(
        "workflow %s (%s) failed after %.3fs (attempt %d of %d): %s",
        run.id,
        run.workflow_type,
        elapsed,
        run.attempts,
        run.max_retries + 1,
        printable(message),
    )
    return Outcome.FAILED

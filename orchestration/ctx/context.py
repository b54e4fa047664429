"""``ctx``: what a workflow function receives, and where steps are replayed or run."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import transaction

from .. import clock, waits
from ..api import start_batch_ids, start_workflow
from ..claim.lease import Lease, RecordedStep
from ..conf import conf
from ..errors import (
    ControlFlow,
    DeadlineExceeded,
    EventTimeout,
    InvalidWorkflowInput,
    LeaseLost,
    NonDeterministicWorkflow,
    PermanentError,
    ReleaseRequested,
    StepTimeout,
    Suspend,
)
from ..models import StepStatus, Workflow
from ..observability import observe
from ..outages import is_outage
from ..terminal import printable
from ..validation import (
    ERROR_MESSAGE_MAX_LENGTH,
    NotJSONSerializable,
    storable_text,
    to_json,
    to_json_value,
    to_timedelta,
    validate_event_name,
    validate_progress,
    validate_step_name,
    validate_step_timeout,
)
from ..waits import Wait
from . import children
from .children import ChildHandle, inherited_tags
from .patches import Patches
from .timeouts import Expired, call_within

logger = logging.getLogger(__name__)


#: A timer due within this many seconds is waited out in place: cheaper than a
#: suspend and a claim. It never ends before its moment.
WAIT_IN_PLACE = 0.05


class WorkflowContext:
    """Passed to every workflow function as ``ctx``.

    Steps are numbered 1, 2, 3 ... in call order. A step recorded as completed
    returns its stored output without running; any other step runs, and its
    JSON result is checkpointed before the next step starts.
    """

    def __init__(
        self,
        run: Lease,
        recorded: dict[int, RecordedStep],
        *,
        should_release: Callable[[], bool] = lambda: False,
        step_timeout: datetime.timedelta | None = None,
    ) -> None:
        self._run = run
        self._recorded = recorded
        self._should_release = should_release
        #: The workflow's default time limit of a step, in seconds.
        self._step_timeout = step_timeout.total_seconds() if step_timeout is not None else None
        self._next_number = 1
        self._patches = Patches(run)
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

    @property
    def queue(self) -> str:
        return self._run.queue

    def next_step(self) -> tuple[int, bool]:
        """The number the next step gets, and whether it is recorded completed (a replay: it runs nothing)."""
        recorded = self._recorded.get(self._next_number)
        return self._next_number, recorded is not None and recorded.status == StepStatus.COMPLETED

    def set_progress(self, details: dict[str, Any]) -> None:
        """Say how far the run has got: ``details`` is a JSON object, such as
        ``{"done": 40, "total": 100, "message": "resizing"}``, stored in the run's
        ``progress`` and handed to those who wait for its result
        (``wait_for_result(..., on_progress=...)``). Callable in the workflow's
        body and in a step's function. Reports are coalesced: at most about one
        write a second, and the last one is written by the next step boundary
        or the run's end. A value that is not a JSON object, or over
        ``PROGRESS_MAX_BYTES``, raises ``InvalidWorkflowInput`` here, and nothing
        of it is kept."""
        value = validate_progress(details)
        if self._run.note_progress(value) and not _in_event_loop():  # the ORM refuses to run in a loop
            self._run.write_progress()

    def patched(self, change_id: str) -> bool:
        """True where this run reaches this point on code with change ``change_id``;
        False where it passed it on the code before (so every replay branches as
        the first run did). ``if ctx.patched("id"): new... else: old...``; see
        ``orchestration.ctx.patches`` for how the run's history decides."""
        return self._patches.patched(change_id, self._next_number, self._recorded)

    def deprecate_patch(self, change_id: str) -> None:
        """Where only the new branch of ``change_id`` is left: runs that took it
        replay; a run that passed this point on the old code fails with
        ``NonDeterministicWorkflow`` instead of running the wrong branch."""
        self._patches.deprecated(change_id, self._next_number, self._recorded)

    @observe.step
    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        timeout: float | datetime.timedelta | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and checkpoint its JSON result.

        On replay a completed step returns the stored result without running.
        The body runs at least once (again, if the worker died before the
        checkpoint was written); the checkpoint is written exactly once.

        ``timeout`` (seconds or a timedelta; default: the workflow's
        ``step_timeout``) is the engine's, never passed to ``fn``: pass ``fn``
        its own with ``functools.partial(fn, timeout=...)``. Past it the attempt
        fails with ``StepTimeout`` and is retried; the body, which Python cannot
        stop, is abandoned in a thread of its own (see ``orchestration.ctx.timeouts``).
        """
        limit = self._step_timeout if timeout is None else validate_step_timeout(timeout, f"ctx.step({name!r}) timeout")
        number, done, output = self._begin(name, recorded_by_claim=True)
        if done:
            return output
        started = time.monotonic()
        try:
            if limit is None and self._run.deadline is None:
                result = fn(*args, **kwargs)
            else:
                result = self._call_within(number, name, limit, fn, args, kwargs)
            output, encoded = _step_json(number, name, result)
        except ControlFlow:
            raise
        except BaseException as exc:  # KeyboardInterrupt, SystemExit ... fail the attempt like any error
            self._record_step_failure(number, name, exc, started)
            raise
        # Written in one transaction with the run's next write (the next step's
        # start, the run's end, a wait): see Lease.defer_checkpoint.
        self._run.defer_checkpoint(number, name, encoded)
        self._completed(number, name, output, started)
        return output

    @observe.step
    def atomic_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Like ``step``, but ``fn`` runs inside ``transaction.atomic()`` on the
        orchestration database and the checkpoint is written in that same
        transaction: a step that only touches that database takes effect exactly
        once, however the worker dies."""
        number, done, output = self._begin(name)
        if done:
            return output
        run = self._run
        started = time.monotonic()
        try:
            with transaction.atomic(using=conf.DATABASE):
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    raise _awaitable_result(number, name, result, ATOMIC_STEP_IS_SYNC)
                output = to_json_value(result, lambda: f"The result of step {number} {name!r}")
                # The fence comes last, so the workflow row is locked only for
                # the commit: a lost lease rolls the step's own writes back too.
                run.complete_step(number, output)
        except ControlFlow:
            raise
        except BaseException as exc:
            recorded = run.recorded_step(number) if is_outage(exc) else None
            if recorded is None or recorded.status != StepStatus.COMPLETED:
                self._record_step_failure(number, name, exc, started)
                raise
            # The COMMIT reached the database and only its reply was lost: the
            # step took effect, and failing it now would run it a second time.
            output = recorded.output
        self._completed(number, name, output, started)
        return output

    def sleep(self, name: str, duration: float | datetime.timedelta) -> None:
        """A durable timer: the workflow is released to pending and resumes on
        any worker once ``duration`` has passed, surviving restarts meanwhile."""
        duration = to_timedelta(duration, f"ctx.sleep({name!r}) duration", allow_zero=True)
        number, recorded = self._next(name)
        if recorded is not None and recorded.status == StepStatus.COMPLETED:
            return
        wake_at = self._wait_started(number, name, recorded, "wake_at", lambda now: now + duration)
        assert wake_at is not None
        if _reached(wake_at):
            details = {"wake_at": wake_at.isoformat()}
            self._run.complete_step(number, details)
            self._completed(number, name, details, None)
            return
        raise Suspend(wake_at, Wait.timer(name, wake_at))

    def wait_for_event(self, name: str, timeout: float | datetime.timedelta | None = None) -> Any:
        """Wait until ``send_event(workflow_id, name, payload)``, and return the payload.

        An event sent before the wait is kept and returned at once. With a
        ``timeout`` (seconds or timedelta), ``EventTimeout`` is raised when it
        passes first; uncaught, it fails the workflow without retries.
        """
        validate_event_name(name)
        limit = None
        if timeout is not None:
            limit = to_timedelta(timeout, f"ctx.wait_for_event({name!r}) timeout", allow_zero=True)
        number, recorded = self._next(name)
        if recorded is not None and recorded.status == StepStatus.COMPLETED:
            return self._event_outcome(name, recorded.output)
        ends = (lambda now: now + limit) if limit is not None else None
        timeout_at = self._wait_started(number, name, recorded, "timeout_at", ends, extra={"event": name})
        run = self._run
        while True:
            found, payload = run.take_event(number, name)
            if found:
                self._completed(number, name, {"payload": payload}, None)
                return payload
            if timeout_at is None:
                break
            left = _left(timeout_at)
            if left <= 0:
                details = {"event": name, "timed_out": True}
                run.complete_step(number, details)
                return self._event_outcome(name, details)
            if left > WAIT_IN_PLACE:
                break
            time.sleep(left)  # then look for the event once more: it may have come meanwhile
        raise Suspend(timeout_at, Wait.event(name), ready=lambda: waits.has_unconsumed_event(run.id, name))

    def start_child(
        self,
        workflow_type: str,
        input_data: Any = None,
        *,
        detached: bool = False,
        inherit_tags: bool = False,
        **options: Any,
    ) -> ChildHandle:
        """Start a child workflow (exactly once, recorded as a step) and return its handle.

        Cancelling this run cancels the child too, unless it is ``detached``.
        With ``inherit_tags=True`` the child is tagged with this run's tags, and
        with its own ``tags=[...]`` after them."""
        if not isinstance(detached, bool):
            raise InvalidWorkflowInput(f"detached must be True or False, not {detached!r}.")
        if not isinstance(inherit_tags, bool):
            raise InvalidWorkflowInput(f"inherit_tags must be True or False, not {inherit_tags!r}.")
        name = f"start child {workflow_type}"[:200]
        number, done, recorded_output = self._begin(name)
        if done:
            return ChildHandle(uuid.UUID(recorded_output["workflow_id"]), workflow_type)
        run = self._run

        def start_child() -> dict[str, str]:
            key = waits.child_key(run.id, number)
            if inherit_tags:
                options["tags"] = inherited_tags(run.id, options.get("tags"))
            child = start_workflow(workflow_type, input_data, idempotency_key=key, **options)
            Workflow.objects.using(conf.DATABASE).filter(pk=child.pk).update(parent_id=run.id, detached=detached)
            return {"workflow_id": str(child.pk)}

        output = run.complete_step_with(number, start_child)
        self._completed(number, name, output, None)
        return ChildHandle(uuid.UUID(output["workflow_id"]), workflow_type)

    def start_children(
        self,
        workflow_type: str,
        inputs: Iterable[Any],
        *,
        detached: bool = False,
        inherit_tags: bool = False,
        **options: Any,
    ) -> list[ChildHandle]:
        """Start a child workflow per item of ``inputs`` and return their handles, in order.

        The children are inserted in one statement (as ``start_workflows``,
        whose options apply to every child) and recorded as one step, so a
        replay reads one row, not one a child; exactly once, as ``start_child``.
        Cancelling this run cancels them too, unless they are ``detached``;
        ``inherit_tags`` as in ``start_child``."""
        if not isinstance(detached, bool):
            raise InvalidWorkflowInput(f"detached must be True or False, not {detached!r}.")
        if not isinstance(inherit_tags, bool):
            raise InvalidWorkflowInput(f"inherit_tags must be True or False, not {inherit_tags!r}.")
        if "idempotency_keys" in options:
            raise InvalidWorkflowInput(
                "ctx.start_children sets idempotency_keys itself: a replay finds its children by them."
            )
        inputs = list(inputs)
        name = f"start {len(inputs)} children {workflow_type}"[:200]
        number, done, recorded_output = self._begin(name)
        if done:
            return [ChildHandle(uuid.UUID(child), workflow_type) for child in recorded_output["workflow_ids"]]
        run = self._run

        def start_children() -> dict[str, Any]:
            keys = [waits.child_key(run.id, f"{number}:{n}") for n in range(len(inputs))]
            parent = {"parent_id": run.id, "detached": detached}
            if inherit_tags:
                options["tags"] = inherited_tags(run.id, options.get("tags"))
            children = start_batch_ids(workflow_type, inputs, parent, idempotency_keys=keys, **options)
            return {"workflow_type": workflow_type, "workflow_ids": [str(child) for child in children]}

        output = run.complete_step_with(number, start_children)
        self._completed(number, name, output, None)
        return [ChildHandle(uuid.UUID(child), workflow_type) for child in output["workflow_ids"]]

    def wait_for(self, handles: Sequence[ChildHandle], *, return_exceptions: bool = False) -> list[Any]:
        """Wait until every child finished; return their outputs in the order of
        ``handles``, one for each handle (a child listed twice gives its output
        twice). A failed or cancelled child fails this workflow with its error
        (``ChildWorkflowFailed``), as soon as it ends; with ``return_exceptions``,
        the wait lasts until every child finished and a failed one's place in
        the list holds its ``ChildWorkflowFailed`` instead.

        The run is woken once the wait can end, not at each child's end
        (``waits.ChildrenWait``); the outcomes are read in one query."""
        ids = [handle.workflow_id for handle in handles]
        name = f"wait for {len(ids)} children"
        number, recorded = self._next(name)
        if recorded is not None and recorded.status == StepStatus.COMPLETED:
            return children.recorded_outcomes(recorded.output, return_exceptions)
        run = self._run
        self._wait_started(number, name, recorded, None, None)  # the children are in the steps that started them
        array = waits.id_array(ids)
        # Counted first: a wait that cannot end yet reads no outcome (10,000 of them, for nothing).
        finished, unsuccessful = run.tally_of(array)
        collected = None
        if finished == len(ids) or (unsuccessful and not return_exceptions):
            collected = run.outcomes_of(array, lambda rows: children.collect(handles, rows, return_exceptions))
        if collected is None:
            wait = waits.ChildrenWait(run.id, number, ids, wake_on_failure=not return_exceptions)
            raise Suspend(None, Wait.children(finished, len(ids)), ready=wait.ready, arm=wait.arm)
        outputs, errors = collected
        if errors and not return_exceptions:
            (error,) = errors.values()  # the first, where ``collect`` stopped
            waits.end_children_waits(run.id)
            self._record_step_failure(number, name, error, None)
            raise error
        recorded_outputs: Any = outputs
        if errors:  # a failure is recorded as its text, and made an exception again on replay
            recorded_outputs = {
                "outputs": outputs,
                "errors": {str(n): children.failure_record(error) for n, error in errors.items()},
            }
            outputs = [errors.get(n) or output for n, output in enumerate(outputs)]
        waits.end_children_waits(run.id)
        run.complete_step(number, recorded_outputs)
        self._completed(number, name, recorded_outputs, None)
        return outputs

    # -- helpers ------------------------------------------------------------

    def _begin(self, name: str, recorded_by_claim: bool = False) -> tuple[int, bool, Any]:
        """Number the next step: ``(number, True, stored output)`` when it is
        recorded as completed, else record it running: ``(number, False, None)``.
        With ``recorded_by_claim``, a step the claim recorded running (still
        unnamed: the caller names it with its outcome) is not recorded again."""
        placeholder = self._run.placeholder
        number, recorded = self._next(name)
        if recorded is not None and recorded.status == StepStatus.COMPLETED:
            return number, True, recorded.output
        self._check_boundary()
        if recorded_by_claim and number == placeholder:
            return number, False, None
        self._run.start_step(number, name)
        return number, False, None

    def _next(self, name: str) -> tuple[int, RecordedStep | None]:
        """Number the next step and check it against the recorded history."""
        validate_step_name(name)
        if self._run.progress is not None:  # the last report lands by the previous step's checkpoint
            self._run.write_progress()
        number = self._next_number
        self._next_number += 1
        if number == self._run.placeholder:
            self._run.placeholder = None  # reached: whatever records this step replaces the claim's row
        recorded = self._recorded.get(number)
        if recorded is not None and recorded.name is not None and recorded.name != name:
            raise NonDeterministicWorkflow(
                f"Non-deterministic workflow: step {number} was recorded as {recorded.name!r}, "
                f"but this run called {name!r} there. Workflow code must call the same steps in the "
                "same order on every run; restart the workflow to run it from scratch."
            )
        if recorded is not None and recorded.status == StepStatus.COMPLETED and recorded.output is not None:
            # Handed to the caller, never read again: a parent's 10,000 children's ids are not kept twice.
            self._recorded[number] = recorded._replace(output=None)
        return number, recorded

    def _wait_started(
        self,
        number: int,
        name: str,
        recorded: RecordedStep | None,
        key: str | None,
        ends: Callable[[datetime.datetime], datetime.datetime] | None,
        extra: dict[str, Any] | None = None,
    ) -> datetime.datetime | None:
        """The wait's recorded limit (``key`` in its details); the first time,
        ``ends(the database's clock now)`` (None: no limit), recorded."""
        details = recorded.output if recorded is not None and isinstance(recorded.output, dict) else None
        if details is not None and (key is None or key in details):
            value = details.get(key) if key else None
            return datetime.datetime.fromisoformat(value) if value else None
        self._check_boundary()
        details = {**(extra or {})}
        default = ends(clock.database_now()) if ends is not None else None
        if key is not None:
            details[key] = default.isoformat() if default else None
        self._run.record_wait(number, name, details)
        self._recorded[number] = RecordedStep(number, name, StepStatus.PENDING, details)
        return default

    def _event_outcome(self, name: str, output: Any) -> Any:
        if isinstance(output, dict) and output.get("timed_out"):
            raise EventTimeout(f"No {name!r} event arrived before the wait's timeout.")
        return output.get("payload") if isinstance(output, dict) else output

    def _call_within(
        self,
        number: int,
        name: str,
        limit: float | None,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """``fn``'s result, if it returns within ``limit`` seconds and before the
        run's deadline while the run is still held; else the body is abandoned
        and the attempt ends (``StepTimeout``, ``DeadlineExceeded``, ``LeaseLost``)."""
        run = self._run
        deadline = None
        if run.deadline is not None:
            deadline = time.monotonic() + (run.deadline - clock.now()).total_seconds()
        thread_name = f"orchestration-step {run.id} {number}"
        try:
            return call_within(
                fn,
                args,
                kwargs,
                timeout=limit,
                deadline=deadline,
                lost=run.lost,
                thread_name=thread_name,
                what=f'workflow {run.id} ({run.workflow_type}) step {number} "{name}"',
            )
        except Expired as expired:
            if expired.abandoned:
                logger.warning(
                    'workflow %s (%s) step %d "%s": stopped waiting for its body (%s); its database connections are '
                    "closed, and it runs on, abandoned, in thread %r",
                    run.id,
                    run.workflow_type,
                    number,
                    printable(name),
                    expired.why,
                    thread_name,
                )
            if expired.why == "lost":
                raise LeaseLost(f"Workflow {run.id} is no longer held by this worker.") from None
            if expired.why == "deadline":
                assert run.deadline is not None
                raise DeadlineExceeded(
                    f'Workflow {run.id} reached its deadline {run.deadline.isoformat()} during step {number} "{name}".'
                ) from None
            body = (
                "its body was abandoned (Python cannot stop a thread) and may still be running"
                if expired.abandoned
                else "its result was dropped"
            )
            raise StepTimeout(f'step "{name}" did not return within its timeout of {limit:g}s; {body}') from None

    def _record_step_failure(self, number: int, name: str, exc: BaseException, started: float | None) -> None:
        self.failed_step = (number, name)
        message = storable_text(f"{type(exc).__name__}: {exc}", ERROR_MESSAGE_MAX_LENGTH)  # stored and logged
        run = self._run
        run.fail_step(number, name, message)
        logger.info(
            'workflow %s (%s) step %d "%s" failed after %.3fs: %s',
            run.id,
            run.workflow_type,
            number,
            printable(name),
            time.monotonic() - started if started is not None else 0.0,
            printable(message),
        )

    def _completed(self, number: int, name: str, output: Any, started: float | None) -> None:
        # Without its output, which is the caller's and never read here again (see ``_next``).
        self._recorded[number] = RecordedStep(number, name, StepStatus.COMPLETED, None)
        # DEBUG: a line a step is most of a short workflow's logging, and the step's row says the same.
        logger.debug(
            'workflow %s (%s) step %d "%s" completed in %.3fs',
            self._run.id_text,
            self._run.workflow_type,
            number,
            printable(name),
            time.monotonic() - started if started is not None else 0.0,
        )

    def _check_boundary(self) -> None:
        if self._run.lost.is_set():
            raise LeaseLost(f"Workflow {self._run.id} is no longer held by this worker.")
        if self._should_release():
            raise ReleaseRequested()
        if self._run.deadline is not None and clock.now() >= self._run.deadline:
            raise DeadlineExceeded(f"Workflow {self._run.id} is past its deadline {self._run.deadline.isoformat()}.")


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: What a step that returned an awaitable is told, by where it was given.
ASYNC_STEP_NEEDS_ASYNC_WORKFLOW = "an async step runs in an `async def` workflow, as `await ctx.step(...)`"
ATOMIC_STEP_IS_SYNC = (
    "atomic_step runs a plain function inside transaction.atomic() (an async one cannot share it); "
    "use ctx.step for an async body"
)


def _left(moment: datetime.datetime) -> float:
    """Seconds from the database's clock now until ``moment``."""
    return (moment - clock.database_now()).total_seconds()


def _reached(moment: datetime.datetime) -> bool:
    """Whether the database's clock has reached ``moment``, waiting here for
    one due within ``WAIT_IN_PLACE``; never before it."""
    while True:
        left = _left(moment)
        if left <= 0:
            return True
        if left > WAIT_IN_PLACE:
            return False
        time.sleep(left)


def _step_json(number: int, name: str, result: Any) -> tuple[Any, str]:
    """``to_json`` of a step's result; an awaitable is refused for what it is,
    checked only then (the check costs more than a small result's encoding)."""
    try:
        return to_json(result, lambda: f"The result of step {number} {name!r}")
    except NotJSONSerializable:
        if inspect.isawaitable(result):
            raise _awaitable_result(number, name, result, ASYNC_STEP_NEEDS_ASYNC_WORKFLOW) from None
        raise


def _awaitable_result(number: int, name: str, result: Any, advice: str) -> PermanentError:
    """An ``async def`` body run as a plain function: a retry cannot help, "not JSON" would hide why."""
    if inspect.iscoroutine(result):
        result.close()  # never awaited: no "coroutine was never awaited" warning
    return PermanentError(f"Step {number} {name!r} returned an awaitable: {advice}")

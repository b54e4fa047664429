"""A claimed run, and every write its worker makes.

Each write is fenced: it changes the row only on ``(id, lease_token,
status='running')``, in one transaction with any step-row write, so a worker
whose lease was taken (reclaimed as stuck, cancelled, released on shutdown)
changes nothing, and the row lock the fence takes serialises it against whoever
took the lease. A write that finds the lease gone raises ``LeaseLost`` (its
subclass ``RunCancelled`` when the run was cancelled) and marks the lease
``lost``; both are control flow (``BaseException``), which a workflow's
``except Exception`` cannot swallow.

A run paused while it runs keeps its lease, not its status: the next fenced
write (a step's start, the run's end, a wait) finds it ``paused`` and raises
``RunPaused``, and the worker gives it back there (``give_back_paused``),
writing the deferred checkpoint of the step it had finished under the same
lease, so the pause costs no completed step.

The writes are retried through a database outage by the lease's ``outage``
policy (the worker's), unless the caller holds a transaction of its own, which
an outage has broken anyway.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.models import F, Func, JSONField, Q, Value
from django.db.models.functions import Coalesce, Now

from .. import transitions, waits
from ..conf import conf
from ..errors import CheckpointRefused, LeaseLost, RunCancelled, RunPaused
from ..listen import notify_new_work
from ..models import StepStatus, Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep
from ..outages import is_outage
from ..retry import backoff_seconds, should_retry
from ..validation import ERROR_MESSAGE_MAX_LENGTH, TRACEBACK_MAX_LENGTH, storable_text
from . import statements
from .batches import completion_params, write_progresses
from .wire import run

T = TypeVar("T")


class Flag:
    """``threading.Event``'s ``set`` and ``is_set``, for a flag that threads
    look at but never wait on: an Event makes a Condition and a lock, at every
    claimed run."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class DeferredCheckpoint(NamedTuple):
    """A completed step whose checkpoint goes with the run's next write (a
    tuple: made at every step, where a frozen dataclass costs four times as much)."""

    number: int
    name: str
    output: str  # as JSON text
    returned_at: float  # time.monotonic() when the step's body returned

    def age(self, now: float) -> float:
        """Seconds since the body returned: ``completed_at`` is written that far back."""
        return max(0.0, now - self.returned_at)


class RecordedStep(NamedTuple):
    """A step as its row records it (a tuple, as ``DeferredCheckpoint``)."""

    number: int
    name: str | None
    status: str
    output: Any


#: How often a run's progress is written at most while its code reports it
#: (seconds): the values between are coalesced, the last one always written
#: (``Lease.note_progress``).
PROGRESS_INTERVAL = 1.0


class Progress(NamedTuple):
    """A value ``ctx.set_progress`` was given, not written yet: as JSON text."""

    text: str


@dataclass
class OutagePolicy:
    """Retry a write through a database outage (``outages.is_outage``: lost,
    unreachable, read-only) while the lease may still be ours: until it is
    lost, ``give_up`` is set, or ``STUCK_AFTER`` has passed (by then the run is
    reclaimed). ``pause(error, failures)`` waits between tries; ``resumed()``
    is told of a write that succeeded after one failed."""

    give_up: threading.Event
    pause: Callable[[BaseException, int], None]
    resumed: Callable[[], None] = lambda: None

    def write(self, lease: Lease, attempt: Callable[[], T]) -> T:
        failures = 0
        give_up_at = time.monotonic() + conf.STUCK_AFTER
        while True:
            try:
                written = attempt()
                if failures:
                    self.resumed()
                return written
            except Exception as exc:
                if not is_outage(exc):
                    raise
                failures += 1
                if lease.lost.is_set() or self.give_up.is_set() or time.monotonic() > give_up_at:
                    raise LeaseLost(f"Workflow {lease.id}: database unavailable too long ({exc})") from exc
                self.pause(exc, failures)


def _through_outages(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def write(lease: Lease, *args: Any, **kwargs: Any) -> T:
        checkpoint = lease.checkpoint

        def attempt() -> T:
            try:
                return method(lease, *args, **kwargs)
            except Exception as exc:
                if is_outage(exc):
                    # The transaction that wrote it is gone: the next try carries it again.
                    lease.checkpoint = checkpoint
                raise

        policy = lease.outage
        if policy is None or connections[conf.DATABASE].in_atomic_block:
            return attempt()
        return policy.write(lease, attempt)

    return write


@dataclass(eq=False)
class Lease:
    """A workflow this process holds, with the lease that fences its writes."""

    id: uuid.UUID
    workflow_type: str
    input_data: Any
    lease_token: uuid.UUID
    attempts: int
    max_retries: int
    queue: str
    parent_id: uuid.UUID | None = None
    deadline: datetime.datetime | None = None
    lost: Flag = field(default_factory=Flag)
    #: Claimed for the first time, with no step recorded.
    fresh: bool = False
    #: A completed step whose checkpoint goes with the run's next write.
    checkpoint: DeferredCheckpoint | None = None
    #: The step the claim recorded running (see ``statements.COMPLETE_AND_CLAIM``),
    #: until the run reaches it; a run ending before that deletes it.
    placeholder: int | None = None
    #: time.monotonic() when it was claimed.
    claimed_at: float = field(default_factory=time.monotonic)
    outage: OutagePolicy | None = None
    #: The progress reported and not written yet (``note_progress``).
    progress: Progress | None = None
    #: time.monotonic() of the last progress write (0: none yet; the first is due an interval after the claim).
    progress_written_at: float = 0.0

    @functools.cached_property
    def id_text(self) -> str:
        """The id as the run's log lines print it, made once: ``str()`` of a
        UUID is half of what a step line's message costs to format."""
        return str(self.id)

    # -- reads --------------------------------------------------------------------

    @_through_outages
    def recorded_steps(self) -> dict[int, RecordedStep]:
        if self.fresh:  # the claim saw no step recorded
            self.fresh = False
            return {}
        rows = _steps().filter(workflow_id=self.id).values_list("step_number", "step_name", "status", "output_data")
        return {number: RecordedStep(number, name, status, output) for number, name, status, output in rows}

    @_through_outages
    def recorded_step(self, number: int) -> RecordedStep | None:
        row = _steps().filter(workflow_id=self.id, step_number=number).values_list("step_name", "status", "output_data")
        found = row.first()
        return RecordedStep(number, *found) if found is not None else None

    @_through_outages
    def recorded_patches(self) -> dict[str, int]:
        return _workflows().filter(pk=self.id).values_list("patches", flat=True).first() or {}

    @_through_outages
    def tally_of(self, children: str) -> tuple[int, int]:
        """Of the children ``children`` (``waits.id_array``): finished, and never to complete."""
        return waits.awaited_tally(children)

    @_through_outages
    def outcomes_of(self, children: str, collect: Callable[[Iterator[Any]], T]) -> T:
        """What ``collect`` makes of the children's outcomes (``waits.awaited_outcomes``),
        as they are read: called again on a fresh read after an outage."""
        rows = waits.awaited_outcomes(children)
        try:
            return collect(rows)
        finally:
            rows.close()  # its cursor, when ``collect`` stopped early

    # -- steps --------------------------------------------------------------------

    @_through_outages
    def start_step(self, number: int, name: str) -> None:
        """Record step ``number`` running, in one statement with the previous
        step's deferred checkpoint."""
        self._fenced(step=number, name=name)

    def defer_checkpoint(self, number: int, name: str, output: str) -> None:
        """Keep step ``number``'s checkpoint to write it with the run's next
        write (the next step's start, the run's end or release, a wait), in the
        same transaction: one transaction a step is saved. ``output`` is the
        step's result as JSON text, as ``validation.to_json`` encoded it.

        Nothing is weakened: a worker that dies before that write loses the
        checkpoint, and the step runs again, exactly as when it dies just
        before an immediate write (step bodies run at least once; the
        checkpoint is still written once).
        """
        self.checkpoint = DeferredCheckpoint(number, name, output, time.monotonic())

    @_through_outages
    def complete_step(self, number: int, output: Any) -> None:
        """Write the step's checkpoint and advance ``current_step`` in one transaction."""
        with transaction.atomic(using=conf.DATABASE):
            # Progress ends a crash loop: deaths are counted at one step in a row.
            self._fence(current_step=number, worker_deaths=0, lost_at_step=None)
            _steps().filter(workflow_id=self.id, step_number=number).update(
                status=StepStatus.COMPLETED, output_data=output, completed_at=Now(), error_message=None
            )

    @_through_outages
    def complete_step_with(self, number: int, write: Callable[[], Any]) -> Any:
        """Run ``write`` and checkpoint what it returns as step ``number``, in one transaction."""
        with transaction.atomic(using=conf.DATABASE):
            output = write()
            self.complete_step(number, output)
            return output

    @_through_outages
    def fail_step(self, number: int, name: str, message: str) -> None:
        message = storable_text(message, ERROR_MESSAGE_MAX_LENGTH)
        with transaction.atomic(using=conf.DATABASE):
            self._fence()
            _steps().filter(workflow_id=self.id, step_number=number).fail(message, name=name)

    @_through_outages
    def record_patch(self, change_id: str, number: int) -> None:
        """Add ``change_id`` (reached before step ``number``) to the run's patches."""
        held = _workflows().filter(pk=self.id, lease_token=self.lease_token, status=WorkflowStatus.RUNNING)
        merged = Func(
            Coalesce("patches", Value({}, JSONField())),
            Value({change_id: number}, JSONField()),
            template="%(expressions)s",
            arg_joiner=" || ",
            output_field=JSONField(),
        )
        if not held.update(patches=merged):
            self._lost()

    # -- progress -----------------------------------------------------------------

    def note_progress(self, details: str) -> bool:
        """Keep ``details`` (JSON text) as the run's progress, to be written by ``write_progress``;
        whether that write is due now (``PROGRESS_INTERVAL`` has passed since the
        last). The caller writes it then, or leaves it for the next step boundary
        or the run's end (``ctx``, ``worker.execution``), so that a thousand
        reports a second cost one write a second and the last one always lands."""
        self.progress = Progress(details)
        # From the claim: a run that ends within the interval writes its report with its batch's completions.
        return time.monotonic() - (self.progress_written_at or self.claimed_at) >= PROGRESS_INTERVAL

    @_through_outages
    def write_progress(self) -> None:
        """Write the progress kept by ``note_progress``, if any, fenced as every
        write of the run: a worker that lost the run writes nothing (``LeaseLost``).
        A value reported while it is written stays kept for the next write."""
        if self.progress is not None and not write_progresses([self]):
            self._lost()

    # -- the run's end ------------------------------------------------------------

    @_through_outages
    def complete(self, output: Any) -> None:
        """Mark the run completed with its result (and its last step's deferred
        checkpoint); the completion statement the worker batches, for one run.
        A child wakes its waiting parent in the same transaction."""
        params = {**completion_params([(self, json.dumps(output))]), "worker": None, "queues": None, "limit": 0}
        with self._transaction_if(self.placeholder is not None or self.parent_id is not None):
            rows = run(conf.DATABASE, statements.CLAIM, params)
            if not rows[0][-1]:
                self._lost()
            self.checkpoint = None
            self._drop_placeholder()
            if self.parent_id is not None:
                waits.children_finished({self.id: self.parent_id})

    @_through_outages
    def fail(
        self, message: str, traceback: str | None, *, retryable: bool, error_class: str | None = None
    ) -> float | None:
        """Fail this attempt: back to pending after a backoff while attempts remain
        (returns the delay in seconds), else failed for good (returns None).
        ``error_class``: the path of the exception's class, kept beside its traceback."""
        message = storable_text(message, ERROR_MESSAGE_MAX_LENGTH)
        traceback = storable_text(traceback, TRACEBACK_MAX_LENGTH, keep_end=True) if traceback else traceback
        if retryable and should_retry(self.attempts, self.max_retries):
            delay = backoff_seconds(self.attempts, conf.RETRY_BACKOFF, conf.RETRY_BACKOFF_MAX)
            self._fence(lambda rows: transitions.retry_later(rows, delay, message, traceback, error_class))
            return delay
        self._fence(lambda rows: transitions.fail(rows, message, traceback, error_class))
        return None

    @_through_outages
    def release(self) -> None:
        """Give the workflow back to pending (on shutdown, or claimed ahead and
        left waiting); the attempt is not spent, and idle workers are woken."""
        with transaction.atomic(using=conf.DATABASE):
            self._fence(transitions.release)
            _steps().filter(workflow_id=self.id, status=StepStatus.RUNNING).fail(
                "released: the worker shut down during this step"
            )
            notify_new_work(conf.DATABASE, self.queue)

    @_through_outages
    def await_worker(self) -> None:
        """Give the run back untouched, for a worker that registers its type
        (this one does not: a deploy in progress, say); ``waiting_for`` says so."""
        waiting_for = waits.Wait.worker(self.workflow_type).text
        self._fence(lambda rows: transitions.await_worker(rows, waiting_for))

    @_through_outages
    def give_back_paused(self) -> WorkflowStatus:
        """Give back a run paused while this worker ran it (``RunPaused``), at its
        step boundary: its deferred checkpoint written, its lease let go, its
        attempt unspent; it stays paused. Resumed before this (running again under
        this lease), it is released to pending instead. Returns the status it is
        left in; raises ``LeaseLost`` if it is no longer this worker's."""
        with transaction.atomic(using=conf.DATABASE):
            held = _workflows().filter(pk=self.id, lease_token=self.lease_token)
            status = held.select_for_update(no_key=True).values_list("status", flat=True).first()
            if status == WorkflowStatus.RUNNING:
                self._fence(transitions.release)
                left = WorkflowStatus.PENDING
            elif status == WorkflowStatus.PAUSED:
                self._checkpoint_paused(held)
                transitions.give_back_paused(held)
                self._drop_placeholder()
                left = WorkflowStatus.PAUSED
            else:
                self._lost()
            _steps().filter(workflow_id=self.id, status=StepStatus.RUNNING).fail(
                "the run was paused during this step; it runs again once the run is resumed"
            )
        if left == WorkflowStatus.PENDING:
            notify_new_work(conf.DATABASE, self.queue)
        return left

    def _checkpoint_paused(self, held: Any) -> None:
        """The deferred checkpoint, on the paused row ``held`` (locked): what
        ``statements.FENCED_WRITE`` writes on a running one."""
        checkpoint, self.checkpoint = self.checkpoint, None
        if checkpoint is None:
            return
        held.update(current_step=checkpoint.number, worker_deaths=0, lost_at_step=None)
        returned_at = Now() - datetime.timedelta(seconds=checkpoint.age(time.monotonic()))
        _steps().filter(workflow_id=self.id, step_number=checkpoint.number).update(
            status=StepStatus.COMPLETED,
            output_data=json.loads(checkpoint.output),
            error_message=None,
            step_name=checkpoint.name,
            completed_at=returned_at,
        )

    @_through_outages
    def cancel_past_deadline(self) -> None:
        assert self.deadline is not None
        message = f"Deadline exceeded: the workflow had to finish by {self.deadline.isoformat()}; cancelled."
        with transaction.atomic(using=conf.DATABASE):
            self._fence(lambda rows: transitions.cancel_past_deadline(rows, message))
            _steps().filter(workflow_id=self.id, status=StepStatus.RUNNING).fail(message)

    # -- waits --------------------------------------------------------------------

    @_through_outages
    def record_wait(self, number: int, name: str, details: dict[str, Any]) -> None:
        """Record a waiting step (``pending``, started) with what it waits for, so
        a replay after a restart waits for the same thing until the same time."""
        with transaction.atomic(using=conf.DATABASE):
            self._fence()
            fields = dict(step_name=name, status=StepStatus.PENDING, started_at=Now(), output_data=details)
            if not _steps().filter(workflow_id=self.id, step_number=number).update(**fields):
                _steps().create(workflow_id=self.id, step_number=number, **fields)

    @_through_outages
    def suspend(
        self,
        until: datetime.datetime | None,
        wait: waits.Wait,
        ready: Callable[[], bool] | None,
        arm: Callable[[], None] | None = None,
    ) -> None:
        """Release a waiting workflow to pending until ``until`` (or until woken),
        without spending its attempt. ``arm()`` runs first, in the same
        transaction, before the run's row is taken (a wait for children marks
        them: ``waits.ChildrenWait``); ``ready()`` is checked after the release,
        so a wake-up that raced with it is never lost."""
        wake_at = until or waits.WAIT_FOREVER
        if self.deadline is not None:
            wake_at = min(wake_at, self.deadline)
        with transaction.atomic(using=conf.DATABASE):
            if arm is not None:
                arm()
            self._fence(lambda rows: transitions.suspend(rows, wake_at, wait.text))
            if ready is not None and ready():
                _workflows().filter(pk=self.id).update(run_after=None)

    @_through_outages
    def take_event(self, number: int, name: str) -> tuple[bool, Any]:
        """Consume the oldest unconsumed event ``name`` and checkpoint it as step
        ``number`` in one transaction. Returns (found, payload).

        An event this step already consumed is returned again instead: a retry
        after a COMMIT whose reply was lost must not consume a second one."""
        events = WorkflowEvent.objects.using(conf.DATABASE)
        with transaction.atomic(using=conf.DATABASE):
            event = (
                events.select_for_update()
                .filter(Q(consumed_by_step__isnull=True) | Q(consumed_by_step=number), workflow_id=self.id, name=name)
                .order_by(F("consumed_by_step").asc(nulls_last=True), "id")
                .values("id", "payload", "consumed_by_step")
                .first()
            )
            if event is None:
                return False, None
            if event["consumed_by_step"] is not None:
                return True, event["payload"]  # consumed with its checkpoint, in one transaction
            events.filter(pk=event["id"]).update(consumed_by_step=number)
            # Fenced: a lost lease rolls the consumption back with the checkpoint.
            self.complete_step(number, {"event_id": event["id"], "payload": event["payload"]})
            return True, event["payload"]

    # -- the fence ----------------------------------------------------------------

    def _fence(self, move: Callable[[Any], int] | None = None, **changes: Any) -> None:
        """Make ``move`` (a function of ``transitions``, given this run's fenced
        row), or touch the row with ``changes``, if and only if this run still
        holds it; write the deferred checkpoint first, in the same transaction,
        and delete the claim's unused placeholder step."""
        outer = connections[conf.DATABASE].in_atomic_block
        try:
            with self._transaction_if(self.checkpoint is not None or self.placeholder is not None):
                if self.checkpoint is not None:
                    self._fenced()
                held = _workflows().filter(pk=self.id, lease_token=self.lease_token, status=WorkflowStatus.RUNNING)
                if move(held) if move is not None else held.update(updated_at=Now(), **changes):
                    self._drop_placeholder()
                    return
                self._lost()
        except DatabaseError as exc:
            if outer or self.checkpoint is None or is_outage(exc):
                raise
            self._refuse_checkpoint(exc)

    def _fenced(self, step: int | None = None, name: str | None = None) -> None:
        """Run ``statements.FENCED_WRITE``, which writes nothing unless this run still
        holds the workflow: the deferred checkpoint, and step ``step`` recorded
        running (none: the fence alone)."""
        params = {"id": self.id, "lease": self.lease_token, "step": step, "name": name, **self.checkpoint_params()}
        try:
            rows = run(conf.DATABASE, statements.FENCED_WRITE, params)
        except DatabaseError as exc:
            if self.checkpoint is None or connections[conf.DATABASE].in_atomic_block or is_outage(exc):
                raise
            self._refuse_checkpoint(exc)
        if not rows[0][0]:
            self._lost()
        self.checkpoint = None

    def _refuse_checkpoint(self, exc: DatabaseError) -> NoReturn:
        """The database refused the deferred checkpoint (and rolled back what went
        with it): the step it completes is failed with the database's reason, and
        so is the attempt, rather than the step being left running."""
        refused, self.checkpoint = self.checkpoint, None
        assert refused is not None
        reason = f'Step {refused.number} "{refused.name}": the database refused its result: {exc}'
        self.fail_step(refused.number, refused.name, reason)
        raise CheckpointRefused(reason) from exc

    def checkpoint_params(self) -> dict[str, Any]:
        checkpoint = self.checkpoint
        if checkpoint is None:
            return statements.NO_CHECKPOINT
        return {
            "checkpoint_step": checkpoint.number,
            "checkpoint_name": checkpoint.name,
            "checkpoint_output": checkpoint.output,
            "checkpoint_age": checkpoint.age(time.monotonic()),
        }

    def _transaction_if(self, several_writes: bool) -> Any:
        """A transaction for a fenced write that makes ``several_writes``, unless
        the caller's already holds them together; else nothing (one statement is
        its own transaction)."""
        if several_writes and not connections[conf.DATABASE].in_atomic_block:
            return transaction.atomic(using=conf.DATABASE)
        return contextlib.nullcontext()

    def _drop_placeholder(self) -> None:
        """The run ends (or waits) without having reached the step its claim
        recorded running: delete that row, which no step ever named."""
        if self.placeholder is not None:
            _steps().filter(workflow_id=self.id, step_number=self.placeholder, step_name__isnull=True).delete()
            self.placeholder = None

    def _lost(self) -> NoReturn:
        self.lost.set()
        status, lease = _workflows().filter(pk=self.id).values_list("status", "lease_token").first() or (None, None)
        if status == WorkflowStatus.CANCELLED:
            raise RunCancelled(f"Workflow {self.id} was cancelled.")
        # Running under this lease again: paused when the write ran, resumed since (``resume_held``).
        # Given back as a pause is, the give-back finds it resumed and releases it to pending.
        if status in (WorkflowStatus.PAUSED, WorkflowStatus.RUNNING) and lease == self.lease_token:
            raise RunPaused(f"Workflow {self.id} was paused; this worker gives it back at this step boundary.")
        raise LeaseLost(f"Workflow {self.id} is no longer held by this worker (it is {status}).")


def _workflows() -> Any:
    return Workflow.objects.using(conf.DATABASE)


def _steps() -> Any:
    return WorkflowStep.objects.using(conf.DATABASE)

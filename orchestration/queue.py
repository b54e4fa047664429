"""The worker's side of the state machine: claim, checkpoint, finish, release,
heartbeat and the stuck-workflow sweep.

Every write here is fenced: it is a conditional UPDATE (or row lock) of the
workflow row on ``(id, lease_token, status='running')``, made in the same
transaction as any step-row write; the hot ones (claim, step start, completion)
are single statements (``sql.py``), so each is one round trip. A worker whose
lease was taken (reclaimed as stuck, cancelled, released on shutdown)
therefore changes nothing, and the row lock the fence takes serialises it
against whoever took the lease.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NoReturn

from django.db import connections, transaction
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from . import sql
from .conf import conf
from .errors import LeaseLost, WorkflowCancelled
from .models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep
from .retry import backoff_seconds, should_retry
from .sql import notify_new_work, try_reclaim_lock

logger = logging.getLogger(__name__)

WORKER_LOST = "worker lost"


@dataclass
class ClaimedRun:
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
    lost: threading.Event = field(default_factory=threading.Event)
    #: Claimed for the first time, with no step recorded.
    fresh: bool = False
    #: A completed step whose checkpoint goes with the run's next write.
    checkpoint: DeferredCheckpoint | None = None
    #: The step the claim recorded running (see ``sql.CLAIM``), until the run
    #: reaches it; a run ending before that deletes it.
    placeholder: int | None = None
    #: time.monotonic() when it was claimed.
    claimed_at: float = field(default_factory=time.monotonic)


#: What ``claim`` returns of each row, in the order of ``ClaimedRun``'s fields.
CLAIMED_COLUMNS = (
    "id",
    "workflow_type",
    "input_data",
    "lease_token",
    "attempts",
    "max_retries",
    "queue",
    "parent_id",
    "deadline",
)


@dataclass(frozen=True)
class DeferredCheckpoint:
    number: int
    name: str
    output: Any
    returned_at: float  # time.monotonic() when the step's body returned

    def age(self, now: float) -> float:
        """Seconds since the body returned: ``completed_at`` is written that far back."""
        return max(0.0, now - self.returned_at)

    def params(self) -> dict[str, Any]:
        return {
            "checkpoint_step": self.number,
            "checkpoint_name": self.name,
            "checkpoint_output": json.dumps(self.output),
            "checkpoint_age": self.age(time.monotonic()),
        }


@dataclass(frozen=True)
class RecordedStep:
    number: int
    name: str | None
    status: str
    output: Any


def _workflows() -> Any:
    return Workflow.objects.using(conf.DATABASE)


def _steps() -> Any:
    return WorkflowStep.objects.using(conf.DATABASE)


#: ``status = 'pending'`` with the value written into the SQL, not bound: the
#: claim is prepared and, for the planning it saves, run with its generic plan
#: (``sql.INDEX_PLANS_ONLY``), which can use the partial index
#: ``idx_workflows_claim`` only if its predicate is provable from the text.
_PENDING = RawSQL(f"'{WorkflowStatus.PENDING.value}'", ())


def _due() -> Q:
    return Q(status=_PENDING) & (Q(run_after__isnull=True) | Q(run_after__lte=Now()))


def claim(worker_id: str, queues: list[str] | None, limit: int = 1) -> list[ClaimedRun]:
    """Lock up to ``limit`` due workflows, mark them running, and commit.

    SKIP LOCKED lets any number of workers claim side by side without ever
    taking the same row; each row gets its own lease token. It is committed
    before any user code runs.
    """
    return finish_and_claim(worker_id, queues, [], limit)[0]


@dataclass
class FinishedRun:
    """A run whose workflow function returned: its completion is written with
    the process's next claim (see ``finish_and_claim``)."""

    run: ClaimedRun
    output: str  # the result, as JSON text
    started: float  # time.monotonic() when the attempt began


def finish_and_claim(
    worker_id: str, queues: list[str] | None, finished: list[FinishedRun], limit: int
) -> tuple[list[ClaimedRun], set[uuid.UUID]]:
    """Complete ``finished`` and claim up to ``limit`` workflows, in one
    transaction and one round trip; return the runs claimed and the ids of
    the runs completed (a finished run missing from them had lost its lease,
    and nothing of it was written).

    A worker thread whose workflow returned asks for its next one at once, so
    its completion waits for no more than that claim; the threads of a process
    asking together share the claim, and the completions with it. A worker
    that dies first loses the completion, and the run's last step runs again,
    as if it had died just before an immediate write (step bodies run at
    least once; a checkpoint is still written once).
    """
    if not finished and not limit:
        return [], set()
    completions = _completions(sorted(finished, key=lambda item: str(item.run.id))) if finished else []
    if finished and limit:
        # One statement: each statement more in the round trip cost the worker
        # and the server their own parse, bind, execute and result handling.
        statement, params = claim_statement(worker_id, queues, limit, completing=True)
        (rows,) = sql.run_together(conf.DATABASE, [(statement, [*completions, *params])])
        completed = set(rows[0][-1] or ())
        claimed = [row[:-1] for row in rows if row[0] is not None]
    elif finished:
        (rows,) = sql.run_together(conf.DATABASE, [(sql.COMPLETE_MANY, completions)])
        completed, claimed = {row[0] for row in rows}, []
    else:
        (claimed,) = sql.run_together(conf.DATABASE, [claim_statement(worker_id, queues, limit)])
        completed = set()
    for item in finished:
        if item.run.id in completed:
            item.run.checkpoint = None
    return _claimed_runs(claimed), completed


def _completions(finished: list[FinishedRun]) -> list[Any]:
    """``sql.COMPLETE_MANY``'s parameters (rows in id order, so that two
    batches lock rows in the same order)."""
    checkpoints = [item.run.checkpoint for item in finished]
    now = time.monotonic()

    def array(values: Any) -> str:  # an array literal: psycopg's list dumper was a tenth of a worker's CPU
        return "{" + ",".join(values) + "}"

    ids = array(str(item.run.id) for item in finished)
    return [
        ids,
        array(str(item.run.lease_token) for item in finished),
        "[" + ",".join(item.output for item in finished) + "]",
        array(str(checkpoint.number) if checkpoint else "NULL" for checkpoint in checkpoints),
        json.dumps([checkpoint.name if checkpoint else None for checkpoint in checkpoints]),
        json.dumps([checkpoint.output if checkpoint else None for checkpoint in checkpoints]),
        array(f"{checkpoint.age(now) if checkpoint else 0.0:.6f}" for checkpoint in checkpoints),
        ids,  # again, for the primary-key lookup
    ]


def _claimed_runs(rows: list[tuple[Any, ...]]) -> list[ClaimedRun]:
    runs = []
    for *values, fresh in rows:
        run = ClaimedRun(**dict(zip(CLAIMED_COLUMNS, values, strict=True)), fresh=fresh)
        run.placeholder = 1 if fresh else None  # step 1, recorded running by the claim (sql.CLAIM)
        if isinstance(run.input_data, str):  # Django reads jsonb as text
            run.input_data = json.loads(run.input_data)
        runs.append(run)
    return runs


def claim_statement(
    worker_id: str, queues: list[str] | None, limit: int = 1, completing: bool = False
) -> tuple[str, list[Any]]:
    """The claim's SQL and parameters (also for ``EXPLAIN`` by the benchmark);
    ``completing``: ``sql.COMPLETE_AND_CLAIM``, whose completions' parameters
    go first."""
    statement, params = _claim_sql(conf.DATABASE, tuple(queues) if queues else None, limit, completing)
    return statement, [*params, worker_id]


@functools.lru_cache(maxsize=128)
def _claim_sql(alias: str, queues: tuple[str, ...] | None, limit: int, completing: bool) -> tuple[str, tuple[Any, ...]]:
    candidates = Workflow.objects.using(alias).filter(_due())
    if queues:
        candidates = candidates.filter(queue__in=queues)
    locked = (
        candidates.order_by("-priority", "created_at")
        .select_for_update(skip_locked=True, no_key=True)
        .values("id", "started_at")[:limit]
    )
    with transaction.atomic(using=alias, savepoint=False):  # Django compiles FOR UPDATE only in one; sends nothing
        select, params = locked.query.get_compiler(using=alias).as_sql()
    returning = ", ".join(f"w.{column}" for column in CLAIMED_COLUMNS)
    template = sql.COMPLETE_AND_CLAIM if completing else sql.CLAIM
    return template.format(locked=select, returning=returning), tuple(params)


def recorded_steps(run: ClaimedRun) -> dict[int, RecordedStep]:
    if run.fresh:  # the claim saw no step recorded (see sql.CLAIM)
        run.fresh = False
        return {}
    rows = _steps().filter(workflow_id=run.id).values_list("step_number", "step_name", "status", "output_data")
    return {number: RecordedStep(number, name, status, output) for number, name, status, output in rows}


def _fence(run: ClaimedRun, **changes: Any) -> None:
    """Touch the workflow row if, and only if, this run still holds it (and
    write the run's deferred checkpoint, if any, in the same transaction, and
    delete its unused placeholder step)."""
    with _one_transaction(run.checkpoint is not None or run.placeholder is not None):
        if run.checkpoint is not None:
            _fenced(run, sql.held(None, checkpoint=True) + sql.COUNT_HELD)
        held = _workflows().filter(pk=run.id, lease_token=run.lease_token, status=WorkflowStatus.RUNNING)
        if held.update(updated_at=Now(), **changes):
            _drop_placeholder(run)
            return
        _lost(run)


def _one_transaction(several_writes: bool) -> Any:
    """A transaction for a fenced write that makes ``several_writes``, unless
    the caller's already holds them together; else nothing (one statement is
    its own transaction)."""
    if several_writes and not connections[conf.DATABASE].in_atomic_block:
        return transaction.atomic(using=conf.DATABASE)
    return contextlib.nullcontext()


def _drop_placeholder(run: ClaimedRun) -> None:
    """The run ends (or waits) without having reached the step its claim
    recorded running: delete that row, which no step ever named."""
    if run.placeholder is not None:
        _steps().filter(workflow_id=run.id, step_number=run.placeholder, step_name__isnull=True).delete()
        run.placeholder = None


def _fenced(run: ClaimedRun, statement: str, **params: Any) -> None:
    """Run a statement made with ``sql.held``; it writes nothing unless this
    run still holds the workflow. The deferred checkpoint goes with it."""
    params.update(id=run.id, lease=run.lease_token)
    if run.checkpoint is not None:
        params.update(run.checkpoint.params())
    (rows,) = sql.run_together(conf.DATABASE, [(statement, params)])
    if not rows or not rows[0][0]:
        _lost(run)
    run.checkpoint = None


def _lost(run: ClaimedRun) -> NoReturn:
    run.lost.set()
    status = _workflows().filter(pk=run.id).values_list("status", flat=True).first()
    if status == WorkflowStatus.CANCELLED:
        raise WorkflowCancelled(f"Workflow {run.id} was cancelled.")
    raise LeaseLost(f"Workflow {run.id} is no longer held by this worker (it is {status}).")


def start_step(run: ClaimedRun, number: int, name: str) -> None:
    """Record step ``number`` running, in one statement with the previous
    step's deferred checkpoint."""
    checkpoint = run.checkpoint is not None
    _fenced(run, sql.held(None, checkpoint) + sql.START_STEP, step=number, name=name)


def complete_step(run: ClaimedRun, number: int, output: Any) -> None:
    """Write the step's checkpoint and advance ``current_step`` in one transaction."""
    with transaction.atomic(using=conf.DATABASE):
        # Progress ends a crash loop: deaths are counted at one step in a row.
        _fence(run, current_step=number, worker_deaths=0, lost_at_step=None)
        _steps().filter(workflow_id=run.id, step_number=number).update(
            status=StepStatus.COMPLETED, output_data=output, completed_at=Now(), error_message=None
        )


def complete_step_deferred(run: ClaimedRun, number: int, name: str, output: Any) -> None:
    """Keep step ``number``'s checkpoint to write it with the run's next write:
    the next step's start, the run's end or release, a wait. Every write is
    fenced and goes through ``_fenced`` or ``_fence``, which write it first, in
    the same transaction; one transaction a step is saved.

    Nothing is weakened: a worker that dies before that write loses the
    checkpoint, and the step runs again, exactly as when it dies just before
    an immediate write (step bodies run at least once; the checkpoint is still
    written once). The step is recorded running before its body runs, as
    always. Code of the workflow function between two steps is not
    checkpointed at all, deferred or not.
    """
    run.checkpoint = DeferredCheckpoint(number, name, output, time.monotonic())


def fail_step(run: ClaimedRun, number: int, name: str, message: str) -> None:
    with transaction.atomic(using=conf.DATABASE):
        _fence(run)
        _steps().filter(workflow_id=run.id, step_number=number).fail(message, name=name)


def complete_workflow(run: ClaimedRun, output: Any) -> None:
    """Mark the run completed with its result (and its last step's deferred
    checkpoint) in one statement."""
    with _one_transaction(run.placeholder is not None):
        checkpoint = run.checkpoint is not None
        _fenced(run, sql.held(sql.COMPLETED, checkpoint) + sql.COUNT_HELD, output=json.dumps(output))
        _drop_placeholder(run)


def fail_workflow(run: ClaimedRun, message: str, traceback: str | None, *, retryable: bool) -> float | None:
    """Fail this attempt: back to pending after a backoff while attempts remain
    (returns the delay in seconds), else failed for good (returns None)."""
    if retryable and should_retry(run.attempts, run.max_retries):
        delay = backoff_seconds(run.attempts, conf.RETRY_BACKOFF, conf.RETRY_BACKOFF_MAX)
        _fence(
            run,
            status=WorkflowStatus.PENDING,
            run_after=Now() + datetime.timedelta(seconds=delay),
            lease_token=None,
            error_message=message,
            error_traceback=traceback,
        )
        return delay
    _fence(
        run,
        status=WorkflowStatus.FAILED,
        finished_at=Now(),
        lease_token=None,
        error_message=message,
        error_traceback=traceback,
    )
    return None


def release(run: ClaimedRun) -> None:
    """Give the workflow back to pending (on shutdown, or claimed ahead and
    left waiting); the attempt is not spent, and idle workers are woken."""
    with transaction.atomic(using=conf.DATABASE):
        _fence(run, status=WorkflowStatus.PENDING, lease_token=None, attempts=F("attempts") - 1)
        _steps().filter(workflow_id=run.id, status=StepStatus.RUNNING).fail(
            "released: the worker shut down during this step"
        )
        notify_new_work(conf.DATABASE, run.queue)


def heartbeat(runs: list[ClaimedRun]) -> list[ClaimedRun]:
    """Refresh ``updated_at`` of every run still held; return the ones lost."""
    if not runs:
        return []
    tokens = [run.lease_token for run in runs]
    with transaction.atomic(using=conf.DATABASE):
        held_rows = _workflows().filter(lease_token__in=tokens, status=WorkflowStatus.RUNNING)
        held_rows.update(updated_at=Now())
        held = set(held_rows.values_list("lease_token", flat=True))
    return [run for run in runs if run.lease_token not in held]


@dataclass
class ReclaimReport:
    requeued: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    quarantined: list[uuid.UUID] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.quarantined)


def reclaim_stuck(stuck_after: float | None = None, batch: int = 500) -> ReclaimReport | None:
    """Send workflows whose worker stopped heartbeating back to pending.

    The attempt they were on stays spent; a workflow with none left, or whose
    worker died ``MAX_WORKER_DEATHS`` times in a row at the same step, fails
    instead. Returns None when another process holds the sweep lock.
    """
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    report = ReclaimReport()
    with transaction.atomic(using=conf.DATABASE):
        if not try_reclaim_lock(conf.DATABASE):
            return None
        stuck = list(
            _workflows()
            .filter(status=WorkflowStatus.RUNNING, updated_at__lt=Now() - datetime.timedelta(seconds=stuck_after))
            .select_for_update(skip_locked=True)
            .values("id", "attempts", "max_retries", "current_step", "worker_deaths", "lost_at_step", "worker_id")[
                :batch
            ]
        )
        for row in stuck:
            _reclaim_one(row, report)
    for workflow_id in report.requeued:
        logger.warning("workflow %s: worker lost, requeued", workflow_id)
    for workflow_id in report.failed + report.quarantined:
        logger.error("workflow %s: worker lost, failed", workflow_id)
    return report


def _reclaim_one(row: dict[str, Any], report: ReclaimReport) -> None:
    lost_step = row["current_step"] + 1
    deaths = row["worker_deaths"] + 1 if row["lost_at_step"] == lost_step else 1
    reason = f"{WORKER_LOST}: {row['worker_id'] or 'a worker'} stopped heartbeating during step {lost_step}"
    _steps().filter(workflow_id=row["id"], status=StepStatus.RUNNING).fail(reason)
    common: dict[str, Any] = dict(lease_token=None, worker_deaths=deaths, lost_at_step=lost_step, updated_at=Now())
    rows = _workflows().filter(pk=row["id"], status=WorkflowStatus.RUNNING)
    if deaths >= conf.MAX_WORKER_DEATHS:
        message = (
            f"Quarantined: the worker died {deaths} times in a row during step {lost_step}; "
            "the step may crash its process (os._exit, out of memory). Fix it, then retry the workflow."
        )
        rows.update(status=WorkflowStatus.FAILED, error_message=message, finished_at=Now(), **common)
        report.quarantined.append(row["id"])
    elif should_retry(row["attempts"], row["max_retries"]):
        rows.update(status=WorkflowStatus.PENDING, error_message=reason, run_after=None, **common)
        report.requeued.append(row["id"])
    else:
        message = f"{reason}; no attempts left ({row['attempts']} of {row['max_retries'] + 1})."
        rows.update(status=WorkflowStatus.FAILED, error_message=message, finished_at=Now(), **common)
        report.failed.append(row["id"])


# -- waiting: timers, events, children, deadlines ------------------------------

#: ``run_after`` of a workflow that waits with no time limit: only ``send_event``
#: or a finishing child wakes it (Python's datetime cannot hold 'infinity').
WAIT_FOREVER = datetime.datetime(9999, 1, 1, tzinfo=datetime.UTC)


def record_wait(run: ClaimedRun, number: int, name: str, details: dict[str, Any]) -> None:
    """Record a waiting step (``pending``, started) with what it waits for, so
    a replay after a restart waits for the same thing until the same time."""
    with transaction.atomic(using=conf.DATABASE):
        _fence(run)
        fields = dict(step_name=name, status=StepStatus.PENDING, started_at=Now(), output_data=details)
        if not _steps().filter(workflow_id=run.id, step_number=number).update(**fields):
            _steps().create(workflow_id=run.id, step_number=number, **fields)


def suspend(
    run: ClaimedRun,
    until: datetime.datetime | None,
    waiting_for: str,
    ready: Any = None,
) -> None:
    """Release a waiting workflow to pending until ``until`` (or until woken),
    without spending its attempt. ``ready()`` is checked after the release, in
    the same transaction, so a wake-up that raced with it is never lost."""
    wake_at = until or WAIT_FOREVER
    if run.deadline is not None:
        wake_at = min(wake_at, run.deadline)
    with transaction.atomic(using=conf.DATABASE):
        _fence(
            run,
            status=WorkflowStatus.PENDING,
            lease_token=None,
            attempts=F("attempts") - 1,
            run_after=wake_at,
            waiting_for=waiting_for[:200],
        )
        if ready is not None and ready():
            _workflows().filter(pk=run.id).update(run_after=None)


def take_event(run: ClaimedRun, number: int, name: str) -> tuple[bool, Any]:
    """Consume the oldest unconsumed event ``name`` and checkpoint it as step
    ``number`` in one transaction. Returns (found, payload)."""
    with transaction.atomic(using=conf.DATABASE):
        event = (
            WorkflowEvent.objects.using(conf.DATABASE)
            .select_for_update()
            .filter(workflow_id=run.id, name=name, consumed_by_step__isnull=True)
            .order_by("id")
            .values("id", "payload")
            .first()
        )
        if event is None:
            return False, None
        WorkflowEvent.objects.using(conf.DATABASE).filter(pk=event["id"]).update(consumed_by_step=number)
        # Fenced: a lost lease rolls the consumption back with the checkpoint.
        complete_step(run, number, {"event_id": event["id"], "payload": event["payload"]})
        return True, event["payload"]


def has_unconsumed_event(workflow_id: uuid.UUID, name: str) -> bool:
    return bool(
        WorkflowEvent.objects.using(conf.DATABASE)
        .filter(workflow_id=workflow_id, name=name, consumed_by_step__isnull=True)
        .exists()
    )


def workflow_outcomes(ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    rows = _workflows().filter(pk__in=ids).values("id", "workflow_type", "status", "output_data", "error_message")
    return {row["id"]: row for row in rows}


def all_finished(ids: list[uuid.UUID]) -> bool:
    return not _workflows().filter(pk__in=ids).exclude(status__in=FINISHED_STATUSES).exists()


def wake_parent(parent_id: uuid.UUID) -> None:
    """A child finished: let its parent, if it waits for children, re-check now."""
    woken = (
        _workflows()
        .filter(pk=parent_id, status=WorkflowStatus.PENDING, waiting_for__startswith="children:")
        .update(run_after=None)
    )
    if woken:
        queue_name = _workflows().filter(pk=parent_id).values_list("queue", flat=True).first()
        notify_new_work(conf.DATABASE, queue_name or "default")


def cancel_past_deadline(run: ClaimedRun) -> None:
    assert run.deadline is not None
    message = f"Deadline exceeded: the workflow had to finish by {run.deadline.isoformat()}; cancelled."
    with transaction.atomic(using=conf.DATABASE):
        _fence(run, status=WorkflowStatus.CANCELLED, finished_at=Now(), lease_token=None, error_message=message)
        _steps().filter(workflow_id=run.id, status=StepStatus.RUNNING).fail(message)

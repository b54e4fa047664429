"""Every change of a workflow's status: the legal moves, and one function each.

``MOVES`` declares them: from which statuses, to which, and who may make the
move. The worker's hot moves (claim, complete) are single statements kept in
``sql``; every other move is one conditional UPDATE made here by ``_move``, which
also writes what entering the target status always writes (``ENTERING``). The
worker's moves are given the fenced row of the run (``lease.Lease``), so a
worker that lost its lease changes nothing; the operator's moves check the
status they start from in the UPDATE itself, so they are safe against a worker
changing the same row at the same moment.
"""

from __future__ import annotations

import datetime
import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import (
    Case,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    JSONField,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest, JSONObject, Least, Now

from . import waits
from .conf import conf
from .errors import InvalidTransition, InvalidWorkflowInput
from .listen import notify_new_work
from .models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep
from .validation import check_text, to_json_value

WorkflowRef = Workflow | uuid.UUID | str

PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, PAUSED = (
    WorkflowStatus.PENDING,
    WorkflowStatus.RUNNING,
    WorkflowStatus.COMPLETED,
    WorkflowStatus.FAILED,
    WorkflowStatus.CANCELLED,
    WorkflowStatus.PAUSED,
)


class Actor(enum.StrEnum):
    WORKER = "worker"  # the process holding the run's lease
    SWEEP = "sweep"  # any process, for a run whose worker stopped heartbeating
    OPERATOR = "operator"  # user code, the admin, the management commands


@dataclass(frozen=True)
class Move:
    sources: tuple[WorkflowStatus, ...]
    target: WorkflowStatus
    by: tuple[Actor, ...]


MOVES: dict[str, Move] = {
    # Written by the claim (claim.statements.COMPLETE_AND_CLAIM):
    "claim": Move((PENDING,), RUNNING, (Actor.WORKER,)),
    "complete": Move((RUNNING,), COMPLETED, (Actor.WORKER,)),
    # The worker's, on its fenced row:
    "retry_later": Move((RUNNING,), PENDING, (Actor.WORKER,)),
    "fail": Move((RUNNING,), FAILED, (Actor.WORKER,)),
    "release": Move((RUNNING,), PENDING, (Actor.WORKER,)),
    "suspend": Move((RUNNING,), PENDING, (Actor.WORKER,)),
    "await_worker": Move((RUNNING,), PENDING, (Actor.WORKER,)),
    "cancel_past_deadline": Move((RUNNING,), CANCELLED, (Actor.WORKER,)),
    # A run paused while it ran, given back at its step boundary: its lease let go, its attempt unspent.
    "give_back_paused": Move((PAUSED,), PAUSED, (Actor.WORKER,)),
    # A run whose worker stopped heartbeating (recovery.reclaim):
    "requeue_stuck": Move((RUNNING,), PENDING, (Actor.SWEEP, Actor.OPERATOR)),
    "fail_stuck": Move((RUNNING,), FAILED, (Actor.SWEEP, Actor.OPERATOR)),
    # The operator's:
    "retry": Move((FAILED, CANCELLED), PENDING, (Actor.OPERATOR,)),
    "retry_from_step": Move((FAILED, CANCELLED), PENDING, (Actor.OPERATOR,)),
    "skip_step": Move((FAILED, CANCELLED), PENDING, (Actor.OPERATOR,)),
    "restart": Move((FAILED, CANCELLED, COMPLETED), PENDING, (Actor.OPERATOR,)),
    "cancel": Move((PENDING, RUNNING, PAUSED), CANCELLED, (Actor.OPERATOR,)),
    # A running run keeps its lease until its worker gives it back at its step boundary ("give_back_paused").
    "pause": Move((PENDING, RUNNING), PAUSED, (Actor.OPERATOR,)),
    "resume": Move((PAUSED,), PENDING, (Actor.OPERATOR,)),
    # Resumed before its worker reached the step boundary: that worker goes on as if never paused.
    "resume_held": Move((PAUSED,), RUNNING, (Actor.OPERATOR,)),
    # The unfinished children of a run cancelled (by an operator, or past its deadline), down the tree:
    "cancel_with_parent": Move((PENDING, RUNNING, PAUSED), CANCELLED, (Actor.OPERATOR, Actor.WORKER)),
}

#: What every move into a status writes besides the status: no status but
#: ``running`` has a lease (and ``paused``, until the worker of a run paused
#: while it ran gives it back), and a finished run has its finishing time.
ENTERING: dict[WorkflowStatus, dict[str, Any]] = {
    PENDING: {"lease_token": None},
    FAILED: {"lease_token": None, "finished_at": Now()},
    CANCELLED: {"lease_token": None, "finished_at": Now(), "run_after": None},
}

#: What an operator's repair resets: the run starts its attempts afresh, and
#: its time limit counts again from now (a row from before the ``timeout``
#: column had its deadline set once, at its start: that is its limit).
FRESH_RUN: dict[str, Any] = {
    "attempts": 0,
    "error_message": None,
    "error_traceback": None,
    "error_class": None,
    "run_after": None,
    "finished_at": None,
    "worker_deaths": 0,
    "lost_at_step": None,
    "deadline": Now() + Coalesce(F("timeout"), F("deadline") - F("created_at"), output_field=DurationField()),
}

#: Errors a run keeps in ``error_history``, newest first.
ERROR_HISTORY_LIMIT = 20


def _recorded_error(message: str, target: WorkflowStatus) -> Func:
    """``error_history`` with ``message`` first: when, at which attempt and step, and
    what the run became; the oldest entries past ``ERROR_HISTORY_LIMIT`` dropped."""
    entry = JSONObject(
        at=Now(),
        attempt=F("attempts"),
        step=F("current_step") + 1,
        status=Cast(Value(str(target)), TextField()),
        message=Cast(Value(message), TextField()),
    )
    history = Func(
        Func(entry, function="jsonb_build_array"),
        Coalesce(F("error_history"), Value([], JSONField())),
        template="(%(expressions)s)",
        arg_joiner=" || ",
        output_field=JSONField(),
    )
    return Func(
        history,
        template=f"jsonb_path_query_array(%(expressions)s, '$[0 to {ERROR_HISTORY_LIMIT - 1}]')",
        output_field=JSONField(),
    )


#: States an operator can repair a workflow from (retry, retry from a step, skip a step).
REPAIRABLE = MOVES["retry"].sources


def _move(rows: QuerySet[Workflow], name: str, **changes: Any) -> int:
    """Make move ``name`` on ``rows`` that are in one of its source statuses;
    return how many moved.

    A run with a parent that ends here (failed, cancelled: every move into
    them is one of these) counts in its parent's wait in the same transaction
    (``waits.children_finished``), so a parent waiting for it never waits on a
    child that can no longer finish.
    """
    move = MOVES[name]
    moving = rows.filter(status__in=move.sources)
    values = {"status": move.target, "updated_at": Now(), **ENTERING.get(move.target, {}), **changes}
    if isinstance(changes.get("error_message"), str):  # every move that records an error keeps it
        values["error_history"] = _recorded_error(changes["error_message"], move.target)
        values.setdefault("error_class", None)  # an error of the engine's: no exception of the run's
    if move.target not in FINISHED_STATUSES:
        return moving.update(**values)
    with transaction.atomic(using=rows.db, savepoint=False):
        # Locked: the rows read here are the rows the UPDATE moves.
        children = moving.filter(parent__isnull=False).select_for_update(no_key=True)
        parents = dict(children.values_list("pk", "parent_id"))
        moved = moving.update(**values)
        if parents:
            waits.children_finished(parents)
    return moved


# -- the worker's moves (``rows``: the run's row, fenced by its lease) -------------


def retry_later(
    rows: QuerySet[Workflow], delay: float, message: str, traceback: str | None, error_class: str | None = None
) -> int:
    after = Now() + datetime.timedelta(seconds=delay)
    return _move(
        rows, "retry_later", run_after=after, error_message=message, error_traceback=traceback, error_class=error_class
    )


def fail(rows: QuerySet[Workflow], message: str, traceback: str | None, error_class: str | None = None) -> int:
    return _move(rows, "fail", error_message=message, error_traceback=traceback, error_class=error_class)


def release(rows: QuerySet[Workflow]) -> int:
    """Back to pending, the attempt given back (a shutdown, a run claimed ahead left waiting)."""
    return _move(rows, "release", attempts=F("attempts") - 1)


def suspend(rows: QuerySet[Workflow], wake_at: datetime.datetime, waiting_for: str) -> int:
    """Back to pending until ``wake_at`` (or a wake-up), the attempt given back: a wait spends none."""
    return _move(rows, "suspend", attempts=F("attempts") - 1, run_after=wake_at, waiting_for=waiting_for)


#: How long a run claimed by a worker that does not register its type waits
#: before it is claimed again: a tenth of its age, within these bounds. A run
#: started during a deploy is soon found by a worker of the new code; one that
#: no worker registers costs a claim a minute until an operator cancels it.
AWAIT_WORKER_DELAY = (datetime.timedelta(seconds=1), datetime.timedelta(seconds=60))


def await_worker(rows: QuerySet[Workflow], waiting_for: str) -> int:
    """Back to pending, untouched as if never claimed (its attempt given back,
    never started if this was its first claim), until a short wait has passed
    (``AWAIT_WORKER_DELAY``): it waits for a worker that registers its type."""
    shortest, longest = AWAIT_WORKER_DELAY
    age = ExpressionWrapper((Now() - F("created_at")) / 10, output_field=DurationField())
    delay = Least(Value(longest), Greatest(Value(shortest), age))
    never_started = Case(When(attempts__lte=1, then=Value(None)), default=F("started_at"))
    return _move(
        rows,
        "await_worker",
        attempts=F("attempts") - 1,
        started_at=never_started,
        run_after=Now() + delay,
        waiting_for=waiting_for,
    )


def give_back_paused(rows: QuerySet[Workflow]) -> int:
    """A run paused while it ran, given back by its worker at its step boundary: its
    lease let go and its attempt given back (a pause is no failure); it stays paused."""
    return _move(rows, "give_back_paused", lease_token=None, attempts=F("attempts") - 1)


def cancel_past_deadline(rows: QuerySet[Workflow], message: str) -> int:
    """Cancelled at its deadline, with its unfinished children (``cancel_children``)."""
    with transaction.atomic(using=rows.db, savepoint=False):
        ids = list(rows.values_list("pk", flat=True))
        _lock_children(ids)
        moved = _move(rows, "cancel_past_deadline", error_message=message)
        if moved:
            _cancel_children(ids, message)
    return moved


# -- a run whose worker stopped heartbeating ---------------------------------------


def requeue_stuck(rows: QuerySet[Workflow], reason: str, **lost: Any) -> int:
    """Back to pending, the attempt it was on spent; ``lost``: the crash-loop count."""
    return _move(rows, "requeue_stuck", error_message=reason, run_after=None, **lost)


def fail_stuck(rows: QuerySet[Workflow], message: str, **lost: Any) -> int:
    return _move(rows, "fail_stuck", error_message=message, **lost)


# -- the operator's moves ----------------------------------------------------------


def workflow_id_of(workflow: WorkflowRef) -> uuid.UUID:
    """The id of a row, a UUID or its text; ``InvalidWorkflowInput`` naming a value that is none of them."""
    if isinstance(workflow, Workflow):
        return workflow.pk
    if isinstance(workflow, uuid.UUID):
        return workflow
    try:
        return uuid.UUID(str(workflow))
    except ValueError:
        raise InvalidWorkflowInput(
            f"{workflow!r} is not a workflow id: give a Workflow row, a UUID or its text."
        ) from None


def _either(words: list[str]) -> str:
    """ "failed, cancelled or completed": a list as a sentence says it."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def operator_move(
    workflow: WorkflowRef,
    name: str,
    verb: str,
    *,
    changes: dict[str, Any] | None = None,
    where: Q | None = None,
    requirement: str | None = None,
    discard_steps_after: int | None = None,
    notify: bool = True,
) -> Workflow:
    """Make move ``name`` on one workflow, or raise ``InvalidTransition`` saying
    what it is and what ``verb`` needs (``requirement``). Returns the row after it."""
    move = MOVES[name]
    workflow_id = workflow_id_of(workflow)
    alias = conf.DATABASE
    rows = Workflow.objects.using(alias)
    with transaction.atomic(using=alias):
        candidates = rows.filter(pk=workflow_id)
        if where is not None:
            candidates = candidates.filter(where)
        try:
            changed = _move(candidates, name, **(changes or {}))
        except IntegrityError as exc:  # uniq_workflows_active_key: another run of its key is active
            raise InvalidTransition(
                f"Cannot {verb} workflow {workflow_id}: another run of its idempotency key (unique while active) "
                "is pending or running; cancel it or let it finish first."
            ) from exc
        current = rows.get(pk=workflow_id)  # raises Workflow.DoesNotExist for an unknown id
        if not changed:
            requirement = requirement or f"a {_either(list(move.sources))} workflow"
            raise InvalidTransition(
                f"Cannot {verb} workflow {workflow_id}: it is {current.status}, and only {requirement} can be."
            )
        if discard_steps_after is not None:
            WorkflowStep.objects.using(alias).filter(
                workflow_id=workflow_id, step_number__gt=discard_steps_after
            ).delete()
            _run_again_from(workflow_id, discard_steps_after + 1, verb)
        if notify:
            notify_new_work(alias, current.queue)
    return current


def _run_again_from(workflow_id: uuid.UUID, first_step: int, verb: str) -> None:
    """Steps from ``first_step`` on, their checkpoints discarded, run again as on
    a first run: the children they started are started afresh (the old ones keep
    their rows, without the idempotency key ``ctx.start_child`` would find them
    by), and the events they consumed are delivered again. Refused while such a
    child is still pending or running: it would run beside its replacement."""
    alias = conf.DATABASE
    prefix = waits.child_key(workflow_id)
    children = Workflow.objects.using(alias).filter(parent_id=workflow_id, idempotency_key__startswith=prefix)
    started_again = []
    for pk, key, status, workflow_type in children.values_list("pk", "idempotency_key", "status", "workflow_type"):
        step = str(key).removeprefix(prefix).split(":")[0]  # ``ctx.start_children``'s keys: step:index
        if not step.isdigit() or int(step) < first_step:
            continue
        if status not in FINISHED_STATUSES:
            raise InvalidTransition(
                f"Cannot {verb} workflow {workflow_id}: its child workflow {pk} ({workflow_type}), started by "
                f"step {step}, is still {status}; cancel it or let it finish first."
            )
        started_again.append(pk)
    # Conditional: a child an operator sent back to pending meanwhile keeps its key; the move is refused.
    released = children.filter(pk__in=started_again, status__in=FINISHED_STATUSES).update(idempotency_key=None)
    if released != len(started_again):
        raise InvalidTransition(f"Cannot {verb} workflow {workflow_id}: a child of it changed meanwhile; try again.")
    events = WorkflowEvent.objects.using(alias).filter(workflow_id=workflow_id, consumed_by_step__gte=first_step)
    events.update(consumed_by_step=None)


def retry_workflow(workflow: WorkflowRef) -> Workflow:
    """Send a failed or cancelled workflow back to pending with fresh attempts
    and, if it has a time limit, a fresh deadline (as every repair gives it).

    Completed steps keep their checkpoints, so it resumes after the last one.
    """
    return operator_move(workflow, "retry", "retry", changes=FRESH_RUN)


def restart_workflow(workflow: WorkflowRef) -> Workflow:
    """Run a finished workflow again from its first step, discarding every checkpoint.

    It runs as a new run would: its children are started afresh and the events
    it consumed are delivered again. Refused while a child it started is still
    pending or running.
    """
    changes = {"current_step": 0, "output_data": None, **FRESH_RUN}
    return operator_move(workflow, "restart", "restart", changes=changes, discard_steps_after=0)


def cancel_workflow(workflow: WorkflowRef, reason: str = "Cancelled.") -> Workflow:
    """Cancel a pending, running or paused workflow, and its unfinished children.

    A running workflow's worker notices at its next step boundary (or
    heartbeat) and writes nothing more; the step it was running is marked
    failed now, since its result will never be recorded. Its pending or
    running children are cancelled in the same transaction, and theirs, down
    the tree (``cancel_children``), except those started ``detached``.
    """
    check_text(reason, "The reason to cancel")
    workflow_id = workflow_id_of(workflow)
    with transaction.atomic(using=conf.DATABASE):
        _lock_children([workflow_id])
        result = operator_move(workflow_id, "cancel", "cancel", changes={"error_message": reason}, notify=False)
        _end_steps([workflow_id], reason)
        _cancel_children([workflow_id], reason)
    return result


def pause_workflow(workflow: WorkflowRef) -> Workflow:
    """Pause a pending or running workflow: no worker claims it until ``resume_workflow``.

    A pending run keeps what it waits for: a timer that passes, an event that
    arrives or a child that finishes while it is paused counts once it is
    resumed. A running run is paused at once and its worker gives it back at
    its next step boundary, the step it was running checkpointed; resumed, it
    goes on after its last completed step. Its time limit, if it has one, keeps
    counting. ``cancel_workflow`` ends a paused run.
    """
    return operator_move(workflow, "pause", "pause", notify=False)


def resume_workflow(workflow: WorkflowRef) -> Workflow:
    """Send a paused workflow back to pending, to be claimed as before it was paused
    (at once if what it waited for came meanwhile).

    A run paused while it ran, whose worker has not reached its step boundary
    yet, is running again instead: that worker goes on as if it was never paused.
    """
    workflow_id = workflow_id_of(workflow)
    alias = conf.DATABASE
    with transaction.atomic(using=alias):
        # A lease on a paused run is its worker's until it gives the run back (``give_back_paused``).
        held = Workflow.objects.using(alias).filter(pk=workflow_id, lease_token__isnull=False)
        if _move(held, "resume_held"):
            return held.get()
    return operator_move(workflow_id, "resume", "resume")


def _end_steps(workflow_ids: list[uuid.UUID], reason: str) -> None:
    """The steps of cancelled runs that will never end: the one running, and a wait (timer, event, children)."""
    steps = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id__in=workflow_ids)
    steps.filter(status=StepStatus.RUNNING).fail(f"Workflow cancelled while this step ran: {reason}")
    steps.filter(status=StepStatus.PENDING).fail(f"Workflow cancelled while it waited: {reason}")


# -- a cancel's children ------------------------------------------------------------
#
# Cancelling a run cancels its unfinished children, and theirs, down the tree, in
# the same transaction: a batch an operator stops, stops. A child started
# ``detached`` is left running, and so are its own children. A run that completes
# or fails on its own leaves its children as they are. The children are locked
# before the run they belong to, deepest first: the order a child's own end takes
# (its row, then its parent's, to wake it), so the two never wait for each other.


def _cancellable(**where: Any) -> QuerySet[Workflow]:
    """The runs ``where`` says that a cancel with their parent may move."""
    return Workflow.objects.using(conf.DATABASE).filter(status__in=MOVES["cancel_with_parent"].sources, **where)


def _unfinished_children(parent_ids: Iterable[uuid.UUID]) -> QuerySet[Workflow]:
    """The children of ``parent_ids`` a cancel of them stops (by ``idx_workflows_parent``)."""
    return _cancellable(parent_id__in=list(parent_ids), detached=False)


def _tree(workflow_ids: list[uuid.UUID]) -> list[dict[uuid.UUID, uuid.UUID]]:
    """The unfinished, attached children of ``workflow_ids`` and theirs, down the
    tree: a level a dict (``{child: its parent}``), the children first."""
    levels: list[dict[uuid.UUID, uuid.UUID]] = []
    seen = set(workflow_ids)
    level: Iterable[uuid.UUID] = workflow_ids
    while level:
        found = dict(_unfinished_children(level).values_list("pk", "parent_id"))
        kept = seen | _shared_with_forks(found)
        level = {pk: parent for pk, parent in found.items() if pk not in kept}
        seen.update(level)
        if level:
            levels.append(level)
    return levels


def _shared_with_forks(children: dict[uuid.UUID, uuid.UUID]) -> set[uuid.UUID]:
    """The ``children`` (``{child: its parent}``) an unfinished fork of their parent
    copied the starting step of, and may wait for: left running for it (see ``forks``)."""
    forks = waits.forks_of(set(children.values()))
    if not forks:  # most runs: one look-up by idx_workflows_forked_from
        return set()
    unfinished = _cancellable(pk__in=forks).values("pk")
    copied = WorkflowStep.objects.using(conf.DATABASE).filter(
        workflow_id__in=unfinished, status=StepStatus.COMPLETED, output_data__workflow_id__in=[str(c) for c in children]
    )
    return {uuid.UUID(pk) for pk in copied.values_list("output_data__workflow_id", flat=True)}


def children_to_stop(workflow_ids: list[uuid.UUID]) -> int:
    """How many runs a cancel of ``workflow_ids`` would also stop: their unfinished
    children, and theirs, down the tree, but for the detached. For a confirmation."""
    return sum(len(level) for level in _tree(workflow_ids))


def _lock_children(workflow_ids: list[uuid.UUID]) -> None:
    """Lock the runs ``_tree`` finds, deepest first, before the runs they belong to."""
    for level in reversed(_tree(workflow_ids)):
        list(_cancellable(pk__in=list(level)).select_for_update(no_key=True).order_by("pk").values_list("pk"))


def _cancel_children(workflow_ids: list[uuid.UUID], reason: str) -> int:
    """Cancel the unfinished children of the runs ``workflow_ids`` (cancelled and
    held), down the tree, each with a message naming its parent. Looked up again:
    a child started since ``_lock_children`` is cancelled too (its parent, now
    locked, can start no other)."""
    cancelled = 0
    for level in _tree(workflow_ids):
        by_parent: dict[uuid.UUID, list[uuid.UUID]] = {}
        for child, parent in level.items():
            by_parent.setdefault(parent, []).append(child)
        for parent, children in sorted(by_parent.items()):
            message = f"Cancelled with its parent workflow {parent}: {reason}"
            cancelled += _move(_cancellable(pk__in=children), "cancel_with_parent", error_message=message)
            _end_steps(children, message)
    return cancelled


def retry_from_step(workflow: WorkflowRef, step_number: int) -> Workflow:
    """Send a failed or cancelled workflow back to pending from step ``step_number``.

    The checkpoints of that step and of every later one are discarded, so they
    run again (children they started are started afresh, events they consumed
    are delivered again, as for ``restart_workflow``); earlier steps keep theirs
    and replay from them. Attempts start afresh.
    """
    _check_step_number(step_number, "retry from")
    workflow_id = workflow_id_of(workflow)
    changes = {"current_step": Least(F("current_step"), step_number - 1), "output_data": None, **FRESH_RUN}
    with transaction.atomic(using=conf.DATABASE):
        moved = operator_move(
            workflow_id, "retry_from_step", "retry", changes=changes, discard_steps_after=step_number - 1
        )
        # Checked once the move holds the row (a failed or cancelled run's steps no longer change):
        # a step past them would re-run the steps before it, which no checkpoint stands for.
        last = completed_in_a_row(workflow_id, below=step_number)
        if step_number > last + 1:
            raise InvalidTransition(
                f"Cannot retry workflow {workflow_id} from step {step_number}: the steps before it must be "
                f"completed, and {completed_range(last)}, so the step must be between 1 and {last + 1}."
            )
    return moved


def completed_in_a_row(workflow_id: uuid.UUID, *, below: int | None = None) -> int:
    """The number of the last of the run's steps completed one after another
    from step 1 (0: none), counting no further than ``below - 1``: the steps a
    retry or a fork can keep as checkpoints."""
    completed = WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id=workflow_id, status=StepStatus.COMPLETED)
    if below is not None:
        completed = completed.filter(step_number__lt=below)
    numbers = completed.order_by("step_number").values_list("step_number", flat=True)
    return next((n for n, number in enumerate(numbers) if number != n + 1), len(numbers))


def completed_range(last: int) -> str:
    """Which steps ``completed_in_a_row`` found, said in an error."""
    return f"this run's completed steps are 1 to {last}" if last else "this run has no completed step"


def skip_step(workflow: WorkflowRef, step_number: int, output: Any) -> Workflow:
    """Record ``output`` as the result of a failed step, and resume the workflow after it.

    For a failed or cancelled workflow whose step ``step_number`` (the one after
    its last completed step) failed, when an operator did that step's work by
    hand: the step becomes completed with ``output`` as its checkpoint, and the
    workflow goes back to pending with fresh attempts, resuming at the next step.
    """
    _check_step_number(step_number, "skip")
    value = to_json_value(output, f"The output supplied for step {step_number}")
    workflow_id = workflow_id_of(workflow)
    alias = conf.DATABASE
    requirement = f"a failed or cancelled workflow whose step {step_number} failed, right after its last completed one"
    with transaction.atomic(using=alias):
        # The conditional UPDATE of the workflow row locks it first, so no worker
        # or other transition can change the workflow or its steps meanwhile.
        result = operator_move(
            workflow_id,
            "skip_step",
            f"skip step {step_number} of",
            where=Q(current_step=step_number - 1),
            requirement=requirement,
            changes={"current_step": step_number, **FRESH_RUN},
        )
        skipped = (
            WorkflowStep.objects.using(alias)
            .filter(workflow_id=workflow_id, step_number=step_number, status=StepStatus.FAILED)
            .update(status=StepStatus.COMPLETED, output_data=value, completed_at=Now(), error_message=None)
        )
        if not skipped:
            raise InvalidTransition(
                f"Cannot skip step {step_number} of workflow {workflow_id}: that step has not failed; "
                f"only {requirement} can be."
            )
    return result


def _check_step_number(step_number: Any, verb: str) -> None:
    if isinstance(step_number, bool) or not isinstance(step_number, int) or step_number < 1:
        raise InvalidTransition(f"Cannot {verb} step {step_number!r}: steps are numbered from 1.")

"""The two tables of the seed schema, with the columns the engine adds.

Every default lives in the database (``db_default``) so that a row inserted by
plain SQL from any language is claimed like one made by ``start_workflow``.
Status changes are written only by ``orchestration.transitions`` (and the hot
path's statements it declares, in ``orchestration.claim.statements``).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.contrib.postgres.functions import RandomUUID
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from . import results


class WorkflowStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Held by an operator (``pause_workflow``): no worker claims it until it is resumed.
    PAUSED = "paused"


class StepStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class KeyScope(models.TextChoices):
    """How long a run's ``idempotency_key`` keeps other starts of it from making a run."""

    ACTIVE = "active"  # while the run is pending, running or paused (unique_while_active)
    DEBOUNCE = "debounce"  # until the run is first claimed (debounce), paused or not


ACTIVE_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING)

#: The statuses in which a run holds a key unique while active: a paused run is
#: still active (resumed, it goes on), so a start of its key returns it.
KEY_HOLDING_STATUSES = (*ACTIVE_STATUSES, WorkflowStatus.PAUSED)
#: The statuses of a run not yet claimed (with ``started_at`` NULL) that holds its debounced key.
UNCLAIMED_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.PAUSED)

FINISHED_STATUSES = (
    WorkflowStatus.COMPLETED,
    WorkflowStatus.FAILED,
    WorkflowStatus.CANCELLED,
)


class Workflow(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, db_default=RandomUUID(), editable=False)
    workflow_type = models.CharField(max_length=100)
    status = models.CharField(
        max_length=20,
        choices=WorkflowStatus.choices,
        default=WorkflowStatus.PENDING,
        db_default=WorkflowStatus.PENDING.value,
    )
    input_data = models.JSONField(null=True, blank=True)
    current_step = models.IntegerField(default=0, db_default=0)
    max_retries = models.IntegerField(default=3, db_default=3)
    error_message = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    # Columns the engine adds to the seed schema.
    attempts = models.IntegerField(default=0, db_default=0)
    output_data = models.JSONField(null=True, blank=True)
    run_after = models.DateTimeField(null=True, blank=True)
    queue = models.CharField(max_length=100, default="default", db_default="default")
    priority = models.IntegerField(default=0, db_default=0)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    # A fresh token per claim: every write a worker makes is conditioned on it,
    # so a worker that lost the workflow can never overwrite newer state.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=255, null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error_traceback = models.TextField(null=True, blank=True)
    # The class (``module.QualName``) of the exception that failed the last
    # attempt, beside its traceback; NULL when the engine recorded the error
    # itself (a lost worker, a deadline, a cancellation).
    error_class = models.TextField(null=True, blank=True)
    # What a pending workflow waits for (a timer, an event, its children), for
    # operators; the wake-up time is ``run_after``.
    waiting_for = models.CharField(max_length=200, null=True, blank=True)
    # Past this moment the workflow is cancelled at its next step boundary.
    deadline = models.DateTimeField(null=True, blank=True)
    # The run's time limit (``timeout=``): the deadline is counted again from
    # each operator's repair (retry, restart ...), or a repaired run would be
    # cancelled at once. NULL: no limit, or a row from before this column.
    timeout = models.DurationField(null=True, blank=True)
    # Indexed by idx_workflows_parent, on children only.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_column="parent_id",
        db_index=False,
    )
    # Started by ``ctx.start_child(..., detached=True)``: a cancel of its parent leaves it running.
    detached = models.BooleanField(default=False, db_default=False)
    # Consecutive worker deaths at ``lost_at_step`` (crash-loop quarantine).
    worker_deaths = models.IntegerField(default=0, db_default=0)
    lost_at_step = models.IntegerField(null=True, blank=True)
    # The trace context (W3C ``traceparent``...) of the code that started the
    # run, so that its attempts' spans join the caller's trace. NULL: none.
    trace_context = models.JSONField(null=True, blank=True)
    # Runs of one key count against their queue's per-key limits (``WorkflowQueue``).
    # Claimed through idx_workflows_queue_claim and idx_workflows_key_claim, made by
    # migration 0006 in SQL (they order by an expression the ORM cannot say).
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    # A start's key with a scope (``KeyScope``): held while the run is active, or
    # until it is claimed, so the same key comes back run after run. Apart from
    # ``idempotency_key`` (a key held for ever, unique where not null), whose
    # unique index the previous release's starts name as their arbiter.
    key_scope = models.CharField(max_length=10, choices=KeyScope.choices, null=True, blank=True)
    scoped_key = models.CharField(max_length=255, null=True, blank=True)
    # The ``ctx.patched`` change ids this run took the new branch of, each with
    # the number of the step that came next: replays take the same branches.
    patches = models.JSONField(null=True, blank=True)
    # The run this one was forked from (``fork_workflow``).
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks", db_index=False
    )
    # Someone waits for this run's result (``results``): entering a finished
    # status, it is announced by the trigger of migration 0010, and only then.
    awaited = models.BooleanField(default=False, db_default=False, editable=False)
    # The errors of its attempts, newest first, at most ``transitions.ERROR_HISTORY_LIMIT``:
    # ``error_message`` keeps only the latest, and a success clears it.
    # The console searches error messages through idx_workflows_error_trgm, and
    # the ends of ids through idx_workflows_id_tail (``listing.search_q``), both
    # made by migration 0011 in SQL.
    error_history = models.JSONField(null=True, blank=True)
    # The wait of its parent (``WorkflowWait``) this child counts in: its end
    # decrements that wait, and only the end that settles it wakes the parent.
    awaited_by_wait = models.UUIDField(null=True, blank=True, editable=False)
    # How far the run has got, as its code last said (``ctx.set_progress``); NULL
    # until it says. Written under the run's lease; a waiter is told of each value
    # by the trigger of migration 0027, as of the run's end.
    progress = models.JSONField(null=True, blank=True)
    # The labels a run was started with (``start_workflow(..., tags=[...])``), a
    # JSON array of strings; NULL: none. jsonb, not an array column, which would
    # need ``django.contrib.postgres`` installed. ``tags__contains`` is read
    # through idx_workflows_tags, made by migration 0028 in SQL (a GIN index
    # of tagged runs only: ``tags @> ...`` implies NOT NULL, so it is used).
    # Each tag is also a row of ``WorkflowTag``, kept by a trigger, which lists
    # a tag's runs newest first (``tagged_q``).
    tags = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "workflows"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="idx_workflows_status"),
            # Claiming reads only pending rows, so millions of finished rows
            # never enter this index and the claim stays an index scan.
            models.Index(
                models.F("priority").desc(),
                "created_at",
                name="idx_workflows_claim",
                condition=Q(status="pending"),
            ),
            # The claim's: the due runs with no ``run_after``, so that the runs that
            # wait, however many, are never read by a claim (``claim.statements.COMPLETE_AND_CLAIM``).
            # idx_workflows_claim, which also holds them, stays for the previous release's workers.
            models.Index(
                models.F("priority").desc(),
                "created_at",
                name="idx_workflows_due",
                condition=Q(status="pending", run_after__isnull=True),
            ),
            # The runs that wait, by the moment they stop: the claims read those whose wait has passed.
            models.Index(
                fields=["run_after"],
                name="idx_workflows_waiting",
                condition=Q(status="pending", run_after__isnull=False),
            ),
            # The stuck-workflow sweep reads only running rows.
            models.Index(fields=["updated_at"], name="idx_workflows_running", condition=Q(status="running")),
            models.Index(fields=["workflow_type", "created_at"], name="idx_workflows_type_created"),
            # The admin lists newest first; without it an unfiltered page sorts the whole table.
            models.Index(fields=["created_at"], name="idx_workflows_created"),
            # The admin's and the CLI's queue filter, newest first.
            models.Index(fields=["queue", "created_at"], name="idx_workflows_queue_created"),
            # Children only: every status change of a run inserts into each
            # index that holds its row, and most runs have no parent.
            models.Index(fields=["parent"], name="idx_workflows_parent", condition=Q(parent__isnull=False)),
            # Keys with a scope (unique while active, debounced), for the search by key;
            # uniq_workflows_idempotency_key holds the others.
            models.Index(fields=["scoped_key"], name="idx_workflows_scoped_key", condition=Q(scoped_key__isnull=False)),
            # Forks only, as for children: deleting a run finds its forks by it.
            models.Index(
                fields=["forked_from"], name="idx_workflows_forked_from", condition=Q(forked_from__isnull=False)
            ),
            # The runs of a key running now, counted by the claim of a queue with per-key limits.
            models.Index(
                fields=["queue", "concurrency_key"],
                name="idx_workflows_key_running",
                condition=Q(status="running", concurrency_key__isnull=False),
            ),
        ]
        constraints = [
            # 0.1.0's, as it was: the arbiter of every release's start with a key held for ever.
            models.UniqueConstraint(
                fields=["idempotency_key"],
                name="uniq_workflows_idempotency_key",
                condition=Q(idempotency_key__isnull=False),
            ),
            # The arbiters of ON CONFLICT in enqueue.KEY_CONFLICTS: a key's one active
            # run (paused too), and its one run not yet claimed (paused too).
            models.UniqueConstraint(
                fields=["scoped_key"],
                name="uniq_workflows_active_key",
                condition=Q(key_scope=KeyScope.ACTIVE, status__in=KEY_HOLDING_STATUSES),
            ),
            models.UniqueConstraint(
                fields=["scoped_key"],
                name="uniq_workflows_debounce_key",
                condition=Q(key_scope=KeyScope.DEBOUNCE, status__in=UNCLAIMED_STATUSES, started_at__isnull=True),
            ),
            models.CheckConstraint(condition=Q(max_retries__gte=0), name="workflows_max_retries_gte_0"),
        ]
        permissions = [
            ("retry_workflow", "Can retry or restart workflows"),
            ("cancel_workflow", "Can cancel workflows"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_type} {self.id}"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def wait_for_result(
        self, timeout: float | datetime.timedelta | None = None, *, on_progress: results.OnProgress | None = None
    ) -> Any:
        """Wait for this run's output: ``orchestration.wait_for_result(self, timeout, on_progress=...)``."""
        return results.wait_for_result(self, timeout, on_progress=on_progress)

    async def aget_result(
        self, timeout: float | datetime.timedelta | None = None, *, on_progress: results.OnProgress | None = None
    ) -> Any:
        """Await this run's output: ``orchestration.aget_result(self, timeout, on_progress=...)``."""
        return await results.aget_result(self, timeout, on_progress=on_progress)


def tagged_q(tag: str) -> Q:
    """The runs tagged ``tag``, through their rows of ``workflow_tags``. Ordered by
    ``TAGGED_NEWEST_FIRST``, a page of them is read in order from that table's
    primary key, however many runs the tag has. ``tags__contains`` finds the
    same runs through a GIN index, which gives no order: every run it finds is
    read, then sorted."""
    return Q(tag_rows__tag=tag)


#: Newest first (``-created_at, -pk``) as ``workflow_tags`` holds it: the order a
#: list filtered by ``tagged_q`` takes so that its rows come in its primary key's
#: order. (Joined on created_at as well, for the list's own order, PostgreSQL
#: would count each condition's selectivity, and expect one run of every tag.)
TAGGED_NEWEST_FIRST = ("-tag_rows__created_at", "-tag_rows__workflow_id")


class WorkflowTag(models.Model):
    """One tag of one run (``workflows.tags``), kept by the triggers of migration
    0034 on every insert, change of ``tags`` or ``created_at``, and delete of a
    tagged run, however it is written (``start_workflow``, plain SQL, the
    purge); an untagged run costs them only their WHEN test. Its primary key,
    ``(tag, created_at, workflow_id)``, is the one index: a tag's runs in the
    order the admin lists them."""

    pk = models.CompositePrimaryKey("tag", "created_at", "workflow")
    tag = models.TextField()
    created_at = models.DateTimeField()
    # No constraint: the delete trigger removes a run's rows, and a foreign key
    # would cost every delete of a run a look-up in this table.
    workflow = models.ForeignKey(
        Workflow,
        on_delete=models.DO_NOTHING,
        related_name="tag_rows",
        db_column="workflow_id",
        db_constraint=False,
        db_index=False,
    )

    class Meta:
        db_table = "workflow_tags"

    def __str__(self) -> str:
        return f"{self.tag}: {self.workflow_id}"


class WorkflowWorker(models.Model):
    """A ``runworkers`` process: registered when it starts, refreshed by its
    heartbeat, deleted when it stops; one that stops heartbeating is marked
    gone by the stuck sweep (``orchestration.worker_rows``)."""

    #: The worker id its runs carry in ``workflows.worker_id``.
    id = models.CharField(max_length=255, primary_key=True)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    #: The names of the queues it serves, as a JSON list; NULL: every queue.
    queues = models.JSONField(null=True, blank=True)
    concurrency = models.IntegerField()
    version = models.CharField(max_length=50)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    gone_at = models.DateTimeField(null=True, blank=True)
    #: Step bodies the process abandoned past their limit that still run, as of
    #: its last heartbeat (``orchestration.ctx.timeouts``).
    abandoned_bodies = models.IntegerField(db_default=0)
    #: How many times the process restarted itself at ``MAX_ABANDONED_BODIES``
    #: before this row (``orchestration.worker.restart``): a restart registers a new row.
    restarts = models.IntegerField(db_default=0)
    #: When the process began to stop (a signal, a restart, a thread that died):
    #: it claims nothing more, and ``workflows health`` says it is stopping.
    stopping_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_workers"
        ordering = ["-started_at"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.id


class WorkflowEvent(models.Model):
    """An event sent to a workflow. Kept until a ``ctx.wait_for_event`` step
    consumes it, so an event sent before the workflow waits is not lost."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="events", db_column="workflow_id")
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # The wait_for_event step that received it; NULL while unconsumed.
    consumed_by_step = models.IntegerField(null=True, blank=True)

    #: Set on the event ``send_event`` returns (not columns): whether the run was
    #: waiting for this name, and the event it waits for instead (None: none).
    awaited: bool | None = None
    waiting_for: str | None = None

    class Meta:
        db_table = "workflow_events"
        ordering = ["workflow", "id"]
        indexes = [
            models.Index(
                fields=["workflow", "name", "id"],
                name="idx_workflow_events_unconsumed",
                condition=Q(consumed_by_step__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"event {self.name} for {self.workflow_id}"


class WorkflowWait(models.Model):
    """A run waiting in ``ctx.wait_for`` for its children: how many of them are
    unfinished, so that a finishing child counts itself out in one statement,
    and the parent is woken once, when its wait can end, not at every child's
    end (``waits``, "a wait for children"). Written by the parent as it
    suspends, which marks each unfinished child with the wait
    (``Workflow.awaited_by_wait``).

    A wait is a row per slot (``slot`` >= 0: the children whose id falls in
    it, ``waits.SLOTS`` of them), so that children ending at once count
    themselves out on different rows, each held until its commit, and a head
    (``slot`` -1: all of them) that only the child emptying a slot takes, to
    see whether every slot is empty."""

    id = models.BigAutoField(primary_key=True)
    wait = models.UUIDField()
    slot = models.SmallIntegerField()
    #: The waiting run (no constraint: a run deleted by SQL leaves its waits, which no child names any more).
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="+", db_column="workflow_id", db_constraint=False
    )
    step_number = models.IntegerField()
    #: Awaited children of the slot not finished yet (of the wait, for the head).
    unsettled = models.IntegerField()
    #: A failed or cancelled child settles it at once (``wait_for`` without ``return_exceptions``).
    wake_on_failure = models.BooleanField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "workflow_waits"
        constraints = [models.UniqueConstraint(fields=["wait", "slot"], name="uniq_workflow_waits_slot")]

    def __str__(self) -> str:
        return f"wait {self.wait} of {self.workflow_id}, slot {self.slot}: {self.unsettled} unsettled"


class StepQuerySet(models.QuerySet["WorkflowStep"]):
    def fail(self, message: str, name: str | None = None) -> int:
        """Mark these steps failed with ``message`` (their result will never be
        recorded); ``name`` names a step its claim recorded unnamed."""
        named = {"step_name": name} if name is not None else {}
        return self.update(status=StepStatus.FAILED, error_message=message, completed_at=Now(), **named)


class WorkflowStep(models.Model):
    id = models.BigAutoField(primary_key=True)
    # Indexed by the seed's (workflow_id, step_number) index and unique constraint.
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="steps", db_column="workflow_id", db_index=False
    )
    step_number = models.IntegerField()
    step_name = models.CharField(max_length=200, null=True, blank=True)
    status = models.CharField(
        max_length=20,
        choices=StepStatus.choices,
        default=StepStatus.PENDING,
        db_default=StepStatus.PENDING.value,
    )
    output_data = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    # How many times the step body was started (at least once semantics).
    attempts = models.IntegerField(default=0, db_default=0)

    objects = StepQuerySet.as_manager()

    class Meta:
        db_table = "workflow_steps"
        ordering = ["workflow", "step_number"]
        constraints = [
            # The seed's UNIQUE(workflow_id, step_number), under the name of its
            # idx_workflow_steps_lookup, which was the same index twice (migration 0018).
            models.UniqueConstraint(fields=["workflow", "step_number"], name="idx_workflow_steps_lookup"),
        ]

    def __str__(self) -> str:
        return f"step {self.step_number} {self.step_name}"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.completed_at:
            return (self.completed_at - self.started_at).total_seconds()
        return None


class WorkflowQueue(models.Model):
    """A queue's flow control, read by every claim of a worker that serves it.

    No row (or a row with every limit None, not paused) means no limit. Rows are
    written by ``orchestration.flow`` (the settings' defaults, ``set_queue_limits``,
    ``pause_queue``, ``resume_queue``, the admin) and read by the limit-aware claims (``claim.statements``).
    """

    name = models.CharField(max_length=100, primary_key=True)
    #: Pending work is not claimed; running work finishes.
    paused = models.BooleanField(default=False, db_default=False)
    #: Runs of the queue ``running`` at once, across every process.
    concurrency = models.IntegerField(null=True, blank=True)
    #: Runs of one ``concurrency_key`` running at once.
    key_concurrency = models.IntegerField(null=True, blank=True)
    #: Claims in any window of the period: ``"100/m"``, ``"10/s"``, ``"1000/h"``.
    rate_limit = models.CharField(max_length=20, null=True, blank=True)
    #: The same, for each ``concurrency_key``.
    key_rate_limit = models.CharField(max_length=20, null=True, blank=True)
    #: The limits are ``ORCHESTRATION["QUEUES"]``'s, which workers write again when they
    #: change; an operator's change (``set_queue_limits``, the admin) turns it off.
    limits_from_settings = models.BooleanField(default=False, db_default=False)
    #: The last key the claim served: the next claim starts after it, so keys take turns.
    key_cursor = models.CharField(max_length=255, null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "workflow_queues"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(concurrency__gt=0), name="workflow_queues_concurrency_gt_0"),
            models.CheckConstraint(condition=Q(key_concurrency__gt=0), name="workflow_queues_key_concurrency_gt_0"),
            models.CheckConstraint(
                condition=Q(rate_limit__regex=r"^[1-9][0-9]{0,8}/[smh]$"), name="workflow_queues_rate_limit_format"
            ),
            models.CheckConstraint(
                condition=Q(key_rate_limit__regex=r"^[1-9][0-9]{0,8}/[smh]$"),
                name="workflow_queues_key_rate_limit_format",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class QueueStart(models.Model):
    """One claim of a run of a rate-limited queue: the claims of the last period
    are what its rate limit counts. Written and pruned by the claim itself."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100)
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    started_at = models.DateTimeField()

    class Meta:
        db_table = "workflow_queue_starts"
        indexes = [
            models.Index(fields=["queue", "started_at"], name="idx_queue_starts"),
            models.Index(
                fields=["queue", "concurrency_key", "started_at"],
                name="idx_queue_starts_key",
                condition=Q(concurrency_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.started_at}"


class ScheduleTick(models.Model):
    """The last tick of a schedule whose run was started. Retention never
    deletes it (``purge_workflows`` deletes runs, not these), so a tick whose
    run was purged, or that a freshly started process has never seen, is not
    started a second time. One row a schedule, keyed by its name (a code
    schedule's is its workflow type)."""

    name = models.CharField(max_length=200, primary_key=True)
    last_tick = models.DateTimeField(null=True)
    # The run started for it (no foreign key: the run may be purged, this row stays).
    workflow_id = models.UUIDField(null=True)
    started_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "workflow_schedule_ticks"

    def __str__(self) -> str:
        return f"{self.name} {self.last_tick}"


class MissedTicks(models.TextChoices):
    """What a schedule's scheduler starts of the ticks that passed while none ran."""

    LATEST = "latest", "the latest only"
    ALL = "all", "all of them (capped)"


class WorkflowSchedule(models.Model):
    """A cron schedule of a workflow type: one run a tick, in its time zone.

    Written by ``orchestration.schedules.api`` (``schedule``, ``pause_schedule``,
    ``resume_schedule``, the admin), which checks every field first; read by
    every ``runworkers`` process's scheduler at each pass, so a change holds
    within a poll interval. ``@workflow(schedule=...)`` declarations get a row
    too (``from_code``), whose expression follows the code.
    """

    name = models.CharField(max_length=200, unique=True)
    workflow_type = models.CharField(max_length=100)
    #: Five fields, or six with seconds last.
    cron = models.CharField(max_length=100)
    #: The IANA time zone the expression is read in.
    timezone = models.CharField(max_length=64, default="UTC", db_default="UTC")
    #: Each tick's run's input; None: ``{"scheduled_for": "<the tick, ISO 8601>"}``.
    input = models.JSONField(null=True, blank=True)
    enabled = models.BooleanField(default=True, db_default=True)
    missed_ticks = models.CharField(
        max_length=10, choices=MissedTicks.choices, default=MissedTicks.LATEST, db_default=MissedTicks.LATEST
    )
    #: Declared by ``@workflow(schedule=...)``: its expression is the code's.
    from_code = models.BooleanField(default=False, db_default=False)
    #: Ticks at or before it are never started by the scheduler: it moves when the
    #: schedule is made, when its expression or time zone changes, and when it resumes.
    active_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "workflow_schedules"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

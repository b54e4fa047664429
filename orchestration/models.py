"""The two tables of the seed schema, with the columns the engine adds.

Every default lives in the database (``db_default``) so that a row inserted by
plain SQL from any language is claimed like one made by ``start_workflow``.
Status changes are written only by ``orchestration.transitions`` (and the hot
path's statements it declares, in ``orchestration.sql``).
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.functions import RandomUUID
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class WorkflowStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


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
    # Consecutive worker deaths at ``lost_at_step`` (crash-loop quarantine).
    worker_deaths = models.IntegerField(default=0, db_default=0)
    lost_at_step = models.IntegerField(null=True, blank=True)
    # The trace context (W3C ``traceparent``...) of the code that started the
    # run, so that its attempts' spans join the caller's trace. NULL: none.
    trace_context = models.JSONField(null=True, blank=True)

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
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"],
                name="uniq_workflows_idempotency_key",
                condition=Q(idempotency_key__isnull=False),
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
        indexes = [
            models.Index(fields=["workflow", "step_number"], name="idx_workflow_steps_lookup"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "step_number"], name="workflow_steps_workflow_id_step_number_key"
            ),
        ]

    def __str__(self) -> str:
        return f"step {self.step_number} {self.step_name}"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.completed_at:
            return (self.completed_at - self.started_at).total_seconds()
        return None

from django.db import models
from django.db.models.functions import Now


class StepRun(models.Model):
    """One row each time a test step's body actually runs (committed at once),
    so tests can prove which bodies ran and how often."""

    workflow_id = models.UUIDField()
    step_number = models.IntegerField()
    label = models.CharField(max_length=100)
    pid = models.IntegerField()
    # The database's clock, comparable with the checkpoints' completed_at.
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.workflow_id} step {self.step_number} ({self.label})"


class LedgerEntry(models.Model):
    """A database-only side effect, for exactly-once atomic steps."""

    workflow_id = models.UUIDField()
    amount = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.workflow_id}: {self.amount}"

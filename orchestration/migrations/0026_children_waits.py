"""Fan-out at scale: a parent is woken once its wait for children can end.

``workflow_waits`` (a new table: no lock on any other) holds, for each parent
suspended in ``ctx.wait_for``, how many awaited children are unfinished, a row
per slot of them and a head; ``workflows.awaited_by_wait`` (nullable, no
default: no rewrite, a lock held only for a moment, ``WithLockTimeout``: every
worker writes this table) marks each such child with the wait its end counts
down. The previous release's workers neither write nor read either: their
children wake a parent at each end, as before, and a parent they suspended is
woken by the new release's children in the old way (``waits.CHILDREN_FINISHED``).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0025_claim_reads_due_runs_only"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflow",
                name="awaited_by_wait",
                field=models.UUIDField(blank=True, editable=False, null=True),
            ),
        ),
        migrations.CreateModel(
            name="WorkflowWait",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("wait", models.UUIDField()),
                ("slot", models.SmallIntegerField()),
                ("step_number", models.IntegerField()),
                ("unsettled", models.IntegerField()),
                ("wake_on_failure", models.BooleanField()),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                (
                    "workflow",
                    models.ForeignKey(
                        db_column="workflow_id",
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="orchestration.workflow",
                    ),
                ),
            ],
            options={
                "db_table": "workflow_waits",
                "constraints": [models.UniqueConstraint(fields=("wait", "slot"), name="uniq_workflow_waits_slot")],
            },
        ),
    ]

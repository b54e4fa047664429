"""``workflow_steps`` had two identical indexes of ``(workflow_id, step_number)``:
the seed's ``idx_workflow_steps_lookup`` and its ``UNIQUE(workflow_id,
step_number)``'s, and every step row written went into both. The unique
constraint now carries the seed's index name, and the other index is gone: the
constraint and the name stay, one index insert a step row less.

The index is dropped CONCURRENTLY (hence not atomic); renaming the constraint's
index renames the constraint with it, under a lock that lets reads and writes
go on. 0.1.0's ``ON CONFLICT (workflow_id, step_number)`` names the columns,
not the constraint, so it finds its arbiter under either name."""

from __future__ import annotations

from django.db import migrations, models

from orchestration.online_migrations import DropIndexConcurrently, WithLockTimeout

RENAME = "ALTER INDEX workflow_steps_workflow_id_step_number_key RENAME TO idx_workflow_steps_lookup"
RENAME_BACK = "ALTER INDEX idx_workflow_steps_lookup RENAME TO workflow_steps_workflow_id_step_number_key"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("orchestration", "0017_one_count_in_a_lane")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                DropIndexConcurrently(
                    "idx_workflow_steps_lookup",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflow_steps_lookup "
                    "ON workflow_steps (workflow_id, step_number)",
                ),
                WithLockTimeout(migrations.RunSQL(RENAME, RENAME_BACK)),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="workflowstep", name="idx_workflow_steps_lookup"),
                migrations.RemoveConstraint(
                    model_name="workflowstep", name="workflow_steps_workflow_id_step_number_key"
                ),
                migrations.AddConstraint(
                    model_name="workflowstep",
                    constraint=models.UniqueConstraint(
                        fields=("workflow", "step_number"), name="idx_workflow_steps_lookup"
                    ),
                ),
            ],
        )
    ]

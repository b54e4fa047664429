"""``workflow_steps`` had two identical indexes of ``(workflow_id, step_number)``:
the seed's ``idx_workflow_steps_lookup`` and its ``UNIQUE(workflow_id,
step_number)``'s, and every step row written went into both. The unique
constraint now carries the seed's index name, and the other index is gone: the
constraint and the name stay, one index insert a step row less. A rename, not a
rebuild, so it takes no time on a large table."""

from __future__ import annotations

from django.db import migrations, models

FORWARD = """
DROP INDEX idx_workflow_steps_lookup;
ALTER TABLE workflow_steps RENAME CONSTRAINT workflow_steps_workflow_id_step_number_key TO idx_workflow_steps_lookup;
"""
BACKWARD = """
ALTER TABLE workflow_steps RENAME CONSTRAINT idx_workflow_steps_lookup TO workflow_steps_workflow_id_step_number_key;
CREATE INDEX idx_workflow_steps_lookup ON workflow_steps (workflow_id, step_number);
"""


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0017_one_count_in_a_lane")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
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

"""Waiting for results: ``workflows.awaited``, and the trigger that announces
an awaited run's end.

``wait_for_result`` sets ``awaited`` on the run it waits for; when such a run
enters a finished status (by any path: the worker's completion statement, a
failure, a cancel, the sweep, plain SQL), the trigger NOTIFYs the run's id on
``orchestration_result``. A run nobody waits for sends nothing: its status
changes only pay for the trigger's WHEN test. Adding a column with a constant
default rewrites nothing; the column and the trigger take the table's lock
together, for a moment (``WithLockTimeout``).
"""

from __future__ import annotations

from django.db import migrations, models

from orchestration.online_migrations import AddField, WithLockTimeout

NOTIFY_RESULT = """
CREATE FUNCTION orchestration_notify_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('orchestration_result', NEW.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_notify_result
AFTER UPDATE OF status ON workflows
FOR EACH ROW
WHEN (NEW.awaited AND NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION orchestration_notify_result();
"""

DROP_NOTIFY_RESULT = """
DROP TRIGGER workflows_notify_result ON workflows;
DROP FUNCTION orchestration_notify_result();
"""


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0009_versions_keys_patches_forks")]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="awaited",
                field=models.BooleanField(db_default=False, default=False, editable=False),
            ),
            migrations.RunSQL(NOTIFY_RESULT, DROP_NOTIFY_RESULT),
        ),
    ]

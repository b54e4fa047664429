"""An awaited run that is deleted (the retention purge, an operator, plain SQL)
is announced on ``orchestration_result`` like one that finishes, so that its
waiters end with ``Workflow.DoesNotExist`` instead of sleeping until their
timeout, or for ever without one. A run nobody waits for sends nothing: its
delete pays only for the trigger's WHEN test."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

#: The trigger function of migration 0010, which also serves deletes.
NOTIFY_RESULT_OR_DELETE = """
CREATE OR REPLACE FUNCTION orchestration_notify_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('orchestration_result', (CASE TG_OP WHEN 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_notify_deleted AFTER DELETE ON workflows
FOR EACH ROW WHEN (OLD.awaited) EXECUTE FUNCTION orchestration_notify_result();
"""

#: Migration 0010's function and trigger, as they were.
NOTIFY_RESULT_ONLY = """
DROP TRIGGER workflows_notify_deleted ON workflows;
CREATE OR REPLACE FUNCTION orchestration_notify_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('orchestration_result', NEW.id::text);
    RETURN NULL;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0014_hand_over_claims")]

    operations = [WithLockTimeout(migrations.RunSQL(NOTIFY_RESULT_OR_DELETE, NOTIFY_RESULT_ONLY))]

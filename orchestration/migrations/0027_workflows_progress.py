"""``workflows.progress``: how far a run has got, as its code last said
(``ctx.set_progress``), and the trigger that tells its waiters of each new value.

A nullable column with no default: no rewrite, the table's lock held only for a
moment (``WithLockTimeout``: every worker writes this table), and the previous
release's writes, which do not name it, still hold. The trigger fires only on
an UPDATE that names ``progress`` (the progress writes, none of the hot path's
statements), and NOTIFYs only for a run someone waits for (``awaited``), with
the function of migration 0010, on the channel the waiters already listen to.
"""

from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout

NOTIFY_PROGRESS = """
CREATE TRIGGER workflows_notify_progress
AFTER UPDATE OF progress ON workflows
FOR EACH ROW
WHEN (NEW.awaited AND NEW.progress IS DISTINCT FROM OLD.progress)
EXECUTE FUNCTION orchestration_notify_result();
"""

DROP_NOTIFY_PROGRESS = "DROP TRIGGER workflows_notify_progress ON workflows;"


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0026_children_waits"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflow",
                name="progress",
                field=models.JSONField(blank=True, null=True),
            ),
            migrations.RunSQL(NOTIFY_PROGRESS, DROP_NOTIFY_PROGRESS),
        ),
    ]

"""``workflow_workers.stopping_since``: when a process began to stop, for
``workflows health`` (a stopping worker is not ready). A nullable column with
no default: no rewrite, a lock held only for a moment (``WithLockTimeout``:
every running worker's heartbeat writes this table), and the previous
release's inserts, which do not name it, still hold."""

from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0022_workflows_detached"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflowworker",
                name="stopping_since",
                field=models.DateTimeField(blank=True, null=True),
            ),
        ),
    ]

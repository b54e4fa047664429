"""``workflow_workers.abandoned_bodies`` and ``restarts``: what the workers page
shows of a process's hung step bodies and of its restarts at
``MAX_ABANDONED_BODIES``. Two columns with a constant database default: no
rewrite, a lock held only for a moment (``WithLockTimeout``: every running
worker's heartbeat writes this table), and the previous release's inserts,
which name neither, still hold."""

from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0019_schedule_ticks"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflowworker",
                name="abandoned_bodies",
                field=models.IntegerField(db_default=0),
            ),
            migrations.AddField(
                model_name="workflowworker",
                name="restarts",
                field=models.IntegerField(db_default=0),
            ),
        ),
    ]

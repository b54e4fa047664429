"""``workflows.error_class``: the class of the exception that failed the last
attempt, kept beside its traceback (the Tasks backend's ``TaskError``). A
nullable column with no default: no rewrite, a lock held only for a moment
(``WithLockTimeout``: every worker writes this table), and the previous
release's writes, which do not name it, still hold."""

from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0023_worker_stopping_since"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflow",
                name="error_class",
                field=models.TextField(blank=True, null=True),
            ),
        ),
    ]

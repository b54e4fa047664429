from django.db import migrations, models

from orchestration.online_migrations import AddField, WithLockTimeout


class Migration(migrations.Migration):
    """The run's time limit, so that an operator's repair counts its deadline
    again from the repair. Nullable, with no default: adding it rewrites no row,
    and its lock is held for a moment (``WithLockTimeout``)."""

    dependencies = [
        ("orchestration", "0005_workflows_parent_index_children_only"),
    ]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="timeout",
                field=models.DurationField(blank=True, null=True),
            ),
        ),
    ]

"""``workflows.detached``: a child started with ``ctx.start_child(..., detached=True)``,
which a cancel of its parent leaves running. A column with a constant database
default: no rewrite, the table's lock held only for a moment (``WithLockTimeout``),
and the previous release's inserts, which do not name it, still hold."""

from django.db import migrations, models

from orchestration.online_migrations import WithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0021_claim_keeps_no_session_state"),
    ]

    operations = [
        WithLockTimeout(
            migrations.AddField(
                model_name="workflow",
                name="detached",
                field=models.BooleanField(db_default=False, default=False),
            ),
        ),
    ]

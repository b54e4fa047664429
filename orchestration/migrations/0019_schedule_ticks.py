"""``workflow_schedule_ticks``: the last tick each schedule started, kept where
retention does not reach, so a purged run's tick is not started again. A new,
small table: nothing is locked or rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0018_one_index_of_a_runs_steps"),
    ]

    operations = [
        migrations.CreateModel(
            name="ScheduleTick",
            fields=[
                ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("last_tick", models.DateTimeField(null=True)),
                ("workflow_id", models.UUIDField(null=True)),
                ("started_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": "workflow_schedule_ticks",
            },
        ),
    ]

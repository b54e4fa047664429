"""``workflow_schedules``: schedules as rows, made and paused in the admin or
with ``orchestration.schedule``, and a row for each ``@workflow(schedule=...)``.
A new, small table: nothing is locked or rewritten."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0029_claim_sorts_priced_out"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowSchedule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=200, unique=True)),
                ("workflow_type", models.CharField(max_length=100)),
                ("cron", models.CharField(max_length=100)),
                ("timezone", models.CharField(db_default="UTC", default="UTC", max_length=64)),
                ("input", models.JSONField(blank=True, null=True)),
                ("enabled", models.BooleanField(db_default=True, default=True)),
                (
                    "missed_ticks",
                    models.CharField(
                        choices=[("latest", "the latest only"), ("all", "all of them (capped)")],
                        db_default="latest",
                        default="latest",
                        max_length=10,
                    ),
                ),
                ("from_code", models.BooleanField(db_default=False, default=False)),
                ("active_since", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "db_table": "workflow_schedules",
                "ordering": ["name"],
            },
        ),
    ]

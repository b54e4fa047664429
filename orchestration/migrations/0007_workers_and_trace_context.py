import django.db.models.functions.datetime
from django.db import migrations, models

from orchestration.online_migrations import AddField, CreateIndexConcurrently, WithLockTimeout


class Migration(migrations.Migration):
    """Observability: the workers as rows (``workflow_workers``), the caller's
    trace context on each run (nullable, no default: adding it rewrites no row,
    and its lock is held for a moment), and the queue filter's index, built
    CONCURRENTLY so that a large table keeps taking writes meanwhile (hence
    not atomic)."""

    atomic = False

    dependencies = [
        ("orchestration", "0006_workflows_timeout"),
    ]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="trace_context",
                field=models.JSONField(blank=True, null=True),
            ),
        ),
        CreateIndexConcurrently(
            "idx_workflows_queue_created",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_queue_created ON workflows (queue, created_at)",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(fields=["queue", "created_at"], name="idx_workflows_queue_created"),
                )
            ],
        ),
        WithLockTimeout(
            migrations.CreateModel(
                name="WorkflowWorker",
                fields=[
                    ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                    ("host", models.CharField(max_length=255)),
                    ("pid", models.IntegerField()),
                    ("queues", models.JSONField(blank=True, null=True)),
                    ("concurrency", models.IntegerField()),
                    ("version", models.CharField(max_length=50)),
                    ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ("last_seen_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ("gone_at", models.DateTimeField(blank=True, null=True)),
                ],
                options={
                    "verbose_name": "worker",
                    "db_table": "workflow_workers",
                    "ordering": ["-started_at"],
                },
            ),
        ),
    ]

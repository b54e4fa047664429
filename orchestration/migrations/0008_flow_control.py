"""Flow control: the ``workflow_queues`` table (pause, concurrency, per-key and
rate limits), a run's ``concurrency_key``, and what the limit-aware claim reads.

Two indexes are written in SQL: they order pending runs by ``-priority::bigint``
rather than ``priority DESC``, so that no plan can answer their queries with
the claim index instead (its ordered scan, filtered by queue or key, would walk
every other queue's or key's backlog; see ``claim.statements.COMPLETE_AND_CLAIM_LIMITED``):

- ``idx_workflows_queue_claim``: a queue's pending runs, those without a key
  apart from those with one, each in claim order;
- ``idx_workflows_key_claim``: one key's pending runs in claim order, and the
  keys of a queue one index probe each.

Adding a nullable column rewrites nothing, and its lock is held for a moment;
the indexes are built CONCURRENTLY, so that a large table keeps taking writes
meanwhile (hence not atomic). The new tables come last, so that a ``migrate``
that stopped part way through runs again from where it stopped.
"""

from __future__ import annotations

import django.db.models.functions.datetime
from django.db import migrations, models

from orchestration.online_migrations import AddField, CreateIndexConcurrently, WithLockTimeout

CLAIM_INDEXES = {
    "idx_workflows_queue_claim": "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_queue_claim ON workflows "
    "(queue, (concurrency_key IS NULL), (-priority::bigint), created_at) WHERE status = 'pending'",
    "idx_workflows_key_claim": "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_key_claim ON workflows "
    "(queue, concurrency_key, (-priority::bigint), created_at) "
    "WHERE status = 'pending' AND concurrency_key IS NOT NULL",
}

RATE = r"^[1-9][0-9]{0,8}/[smh]$"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0007_workers_and_trace_context"),
    ]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="concurrency_key",
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
        ),
        CreateIndexConcurrently(
            "idx_workflows_key_running",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_key_running ON workflows (queue, concurrency_key) "
            "WHERE concurrency_key IS NOT NULL AND status = 'running'",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(
                        condition=models.Q(("concurrency_key__isnull", False), ("status", "running")),
                        fields=["queue", "concurrency_key"],
                        name="idx_workflows_key_running",
                    ),
                ),
            ],
        ),
        *(CreateIndexConcurrently(name, create) for name, create in CLAIM_INDEXES.items()),
        WithLockTimeout(
            migrations.CreateModel(
                name="WorkflowQueue",
                fields=[
                    ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                    ("paused", models.BooleanField(db_default=False, default=False)),
                    ("concurrency", models.IntegerField(blank=True, null=True)),
                    ("key_concurrency", models.IntegerField(blank=True, null=True)),
                    ("rate_limit", models.CharField(blank=True, max_length=20, null=True)),
                    ("key_rate_limit", models.CharField(blank=True, max_length=20, null=True)),
                    ("limits_from_settings", models.BooleanField(db_default=False, default=False)),
                    ("key_cursor", models.CharField(blank=True, editable=False, max_length=255, null=True)),
                    ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ],
                options={
                    "db_table": "workflow_queues",
                    "ordering": ["name"],
                    "constraints": [
                        models.CheckConstraint(
                            condition=models.Q(("concurrency__gt", 0)), name="workflow_queues_concurrency_gt_0"
                        ),
                        models.CheckConstraint(
                            condition=models.Q(("key_concurrency__gt", 0)), name="workflow_queues_key_concurrency_gt_0"
                        ),
                        models.CheckConstraint(
                            condition=models.Q(("rate_limit__regex", RATE)), name="workflow_queues_rate_limit_format"
                        ),
                        models.CheckConstraint(
                            condition=models.Q(("key_rate_limit__regex", RATE)),
                            name="workflow_queues_key_rate_limit_format",
                        ),
                    ],
                },
            ),
            migrations.CreateModel(
                name="QueueStart",
                fields=[
                    ("id", models.BigAutoField(primary_key=True, serialize=False)),
                    ("queue", models.CharField(max_length=100)),
                    ("concurrency_key", models.CharField(blank=True, max_length=255, null=True)),
                    ("started_at", models.DateTimeField()),
                ],
                options={
                    "db_table": "workflow_queue_starts",
                    "indexes": [
                        models.Index(fields=["queue", "started_at"], name="idx_queue_starts"),
                        models.Index(
                            condition=models.Q(("concurrency_key__isnull", False)),
                            fields=["queue", "concurrency_key", "started_at"],
                            name="idx_queue_starts_key",
                        ),
                    ],
                },
            ),
        ),
    ]

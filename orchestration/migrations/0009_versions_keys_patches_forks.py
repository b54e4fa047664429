"""Versions: keys with a lifetime (``key_scope``, ``scoped_key``), the patches
a run took (``patches``, for ``ctx.patched``), and the run a fork came from
(``forked_from``).

A key with a scope (unique while active, debounced) is in a column of its own,
``scoped_key``: the same key comes back run after run there, while
``uniq_workflows_idempotency_key`` (a key held for ever, unique where not null)
stays as 0.1.0 made it, because 0.1.0's start names that index as the arbiter of
its ``ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL``, and runs
on this schema until every process is upgraded (docs/how-to/upgrading.md).

The columns are nullable, so adding them rewrites no row and their lock is
held for a moment; the foreign key is added with its column, all NULL, so
PostgreSQL checks no row, and it sets the link NULL itself when a run with
forks is deleted (as 0.1.0's retention purge does, knowing nothing of forks). The indexes are built CONCURRENTLY (hence not atomic).
"""

import django.db.models.deletion
from django.db import migrations, models

from orchestration.online_migrations import AddField, CreateIndexConcurrently, WithLockTimeout


#: The fork's link, set NULL by PostgreSQL when the run it came from is deleted
#: (Django's on_delete only acts for a delete made through this release's models:
#: 0.1.0's retention purge, or plain SQL, would otherwise fail on a forked run).
FORKED_FROM = (
    "ALTER TABLE workflows ADD COLUMN IF NOT EXISTS forked_from_id uuid NULL "
    "CONSTRAINT workflows_forked_from_id_c60cca13_fk_workflows_id REFERENCES workflows (id) "
    "ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED"
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0008_flow_control"),
    ]

    operations = [
        WithLockTimeout(
            migrations.RunSQL(
                FORKED_FROM,
                "ALTER TABLE workflows DROP COLUMN forked_from_id",
                state_operations=[
                    migrations.AddField(
                        model_name="workflow",
                        name="forked_from",
                        field=models.ForeignKey(
                            blank=True,
                            db_index=False,
                            null=True,
                            on_delete=django.db.models.deletion.SET_NULL,
                            related_name="forks",
                            to="orchestration.workflow",
                        ),
                    )
                ],
            ),
            AddField(
                model_name="workflow",
                name="key_scope",
                field=models.CharField(
                    blank=True, choices=[("active", "Active"), ("debounce", "Debounce")], max_length=10, null=True
                ),
            ),
            AddField(
                model_name="workflow",
                name="scoped_key",
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            AddField(
                model_name="workflow",
                name="patches",
                field=models.JSONField(blank=True, null=True),
            ),
        ),
        CreateIndexConcurrently(
            "idx_workflows_scoped_key",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_scoped_key ON workflows (scoped_key) "
            "WHERE scoped_key IS NOT NULL",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(
                        condition=models.Q(("scoped_key__isnull", False)),
                        fields=["scoped_key"],
                        name="idx_workflows_scoped_key",
                    ),
                )
            ],
        ),
        CreateIndexConcurrently(
            "idx_workflows_forked_from",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_forked_from ON workflows (forked_from_id) "
            "WHERE forked_from_id IS NOT NULL",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(
                        condition=models.Q(("forked_from__isnull", False)),
                        fields=["forked_from"],
                        name="idx_workflows_forked_from",
                    ),
                )
            ],
        ),
        CreateIndexConcurrently(
            "uniq_workflows_active_key",
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS uniq_workflows_active_key ON workflows (scoped_key) "
            "WHERE key_scope = 'active' AND status IN ('pending', 'running')",
            [
                migrations.AddConstraint(
                    model_name="workflow",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("key_scope", "active"), ("status__in", ("pending", "running"))),
                        fields=("scoped_key",),
                        name="uniq_workflows_active_key",
                    ),
                )
            ],
        ),
        CreateIndexConcurrently(
            "uniq_workflows_debounce_key",
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS uniq_workflows_debounce_key ON workflows (scoped_key) "
            "WHERE key_scope = 'debounce' AND status = 'pending' AND started_at IS NULL",
            [
                migrations.AddConstraint(
                    model_name="workflow",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("key_scope", "debounce"), ("started_at__isnull", True), ("status", "pending")),
                        fields=("scoped_key",),
                        name="uniq_workflows_debounce_key",
                    ),
                )
            ],
        ),
    ]

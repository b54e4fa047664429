"""A paused run holds its key: ``uniq_workflows_active_key`` (unique while
active) holds ``paused`` runs beside pending and running ones, and
``uniq_workflows_debounce_key`` a paused run not yet claimed beside a pending
one. Before, a start of the key of a paused run made a second run, and resuming
the first was refused while the second was active.

Each index is built again under a new name CONCURRENTLY (writes go on), the
old one dropped CONCURRENTLY, and the new one renamed to the old name (a lock
that lets reads and writes go on). Every release's ``ON CONFLICT`` names the
narrower predicate of the old index, from which the new one's follows, so
PostgreSQL takes either index as its arbiter throughout. Non-atomic, it runs
again from its start if it stopped part way (``online_migrations``).

A key held today by a paused run and by another run (pending, running or
paused) makes the unique build fail, naming the key: cancel or finish one of
the two and migrate again."""

from django.db import migrations, models

from orchestration.online_migrations import CreateIndexConcurrently, DropIndexConcurrently, WithLockTimeout

ACTIVE = "key_scope = 'active' AND status IN ('pending', 'running', 'paused')"
DEBOUNCE = "key_scope = 'debounce' AND status IN ('pending', 'paused') AND started_at IS NULL"
ACTIVE_BEFORE = "key_scope = 'active' AND status IN ('pending', 'running')"
DEBOUNCE_BEFORE = "key_scope = 'debounce' AND status = 'pending' AND started_at IS NULL"


def rebuilt(name: str, predicate: str, predicate_before: str) -> list[migrations.operations.base.Operation]:
    """Index ``name`` built again with ``predicate``, under its name once the old one is gone."""
    new = f"{name}_held"
    return [
        CreateIndexConcurrently(
            new, f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {new} ON workflows (scoped_key) WHERE {predicate}"
        ),
        DropIndexConcurrently(
            name,
            f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {name} ON workflows (scoped_key) WHERE {predicate_before}",
        ),
        WithLockTimeout(
            migrations.RunSQL(
                f"ALTER INDEX IF EXISTS {new} RENAME TO {name}", f"ALTER INDEX IF EXISTS {name} RENAME TO {new}"
            )
        ),
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0032_claim_probes_queues_in_index_order"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                *rebuilt("uniq_workflows_active_key", ACTIVE, ACTIVE_BEFORE),
                *rebuilt("uniq_workflows_debounce_key", DEBOUNCE, DEBOUNCE_BEFORE),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="workflow", name="uniq_workflows_active_key"),
                migrations.AddConstraint(
                    model_name="workflow",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(key_scope="active", status__in=("pending", "running", "paused")),
                        fields=("scoped_key",),
                        name="uniq_workflows_active_key",
                    ),
                ),
                migrations.RemoveConstraint(model_name="workflow", name="uniq_workflows_debounce_key"),
                migrations.AddConstraint(
                    model_name="workflow",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(key_scope="debounce", status__in=("pending", "paused"), started_at__isnull=True),
                        fields=("scoped_key",),
                        name="uniq_workflows_debounce_key",
                    ),
                ),
            ],
        ),
    ]

"""The claim reads due runs only: the runs that wait (timers, delayed starts,
backoffs, events, parents of unfinished children) are never in its indexes.

A pending run is due when its ``run_after`` is NULL or has passed. The plain
claim reads two index ranges: ``idx_workflows_due`` (the runs with no
``run_after``) and ``idx_workflows_waiting`` (those whose ``run_after`` has
passed). The limit-aware claims first make due (``run_after`` NULL) up to
their limit of the runs whose wait has passed (``claim.statements.MAKE_DUE``),
then read ``idx_workflows_queue_due`` and ``idx_workflows_key_due`` (written in
SQL, as 0008's, for their ``-priority::bigint``). The indexes are built CONCURRENTLY, before
the functions that read them are replaced. The previous release's claims,
which read every pending run and judge ``run_after`` themselves, go on
unchanged: 0008's claim indexes stay until a later release drops them.
Reversed, the indexes are dropped and the functions keep their new text.
"""

from __future__ import annotations

from django.db import migrations, models

from orchestration.claim import functions
from orchestration.online_migrations import CreateIndexConcurrently, WithLockTimeout

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "6b218dced2faa515"

DUE_INDEXES = {
    "idx_workflows_queue_due": "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_queue_due ON workflows "
    "(queue, (concurrency_key IS NULL), (-priority::bigint), created_at) "
    "WHERE status = 'pending' AND run_after IS NULL",
    "idx_workflows_key_due": "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_key_due ON workflows "
    "(queue, concurrency_key, (-priority::bigint), created_at) "
    "WHERE status = 'pending' AND concurrency_key IS NOT NULL AND run_after IS NULL",
}


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("orchestration", "0024_workflows_error_class")]

    operations = [
        CreateIndexConcurrently(
            "idx_workflows_due",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_due ON workflows (priority DESC, created_at) "
            "WHERE status = 'pending' AND run_after IS NULL",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(
                        models.F("priority").desc(),
                        "created_at",
                        condition=models.Q(("run_after__isnull", True), ("status", "pending")),
                        name="idx_workflows_due",
                    ),
                ),
            ],
        ),
        CreateIndexConcurrently(
            "idx_workflows_waiting",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_waiting ON workflows (run_after) "
            "WHERE status = 'pending' AND run_after IS NOT NULL",
            [
                migrations.AddIndex(
                    model_name="workflow",
                    index=models.Index(
                        fields=["run_after"],
                        condition=models.Q(("run_after__isnull", False), ("status", "pending")),
                        name="idx_workflows_waiting",
                    ),
                ),
            ],
        ),
        *(CreateIndexConcurrently(name, create) for name, create in DUE_INDEXES.items()),
        WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop)),
    ]

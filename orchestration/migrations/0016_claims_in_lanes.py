"""``orchestration_complete_and_claim_counted`` claims in lanes, without taking
its queue's turn, while the queue is far from its concurrency limit (see
``orchestration.claim.functions``); the other functions are created again as they
are. Reversed, the function keeps its new body, which claims within the same limits."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "7c63910e590c6b6f"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0015_notify_deleted_awaited_runs")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

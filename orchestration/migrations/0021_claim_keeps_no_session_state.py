"""``orchestration_complete_and_claim_counted`` keeps nothing in the session:
a claim in a lane counts its queue's running runs before it takes the lane
and once it holds it, every time, instead of noting in a session setting that
its last count found the queue far from its limit (behind PgBouncer in
transaction mode another client met that note). Every function loses its
``SET enable_sort = off``, which no plan test shows a plan of (see
``claim.statements.INDEX_PLANS_ONLY``). Reversed, the functions keep their new
text, which claims within the same limits."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "2ba1c4712b3ec191"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0020_worker_abandoned_and_restarts")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

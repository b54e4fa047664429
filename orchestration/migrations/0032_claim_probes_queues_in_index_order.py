"""The limit-aware claims find the queues with due runs by an ordered probe of
``idx_workflows_queue_due`` (``ORDER BY`` its key, ``LIMIT 1``) rather than
``min(queue)``: with statistics that said the table was empty, the planner
answered ``min(queue)`` by reading the whole of ``idx_workflows_due``, every due
run at every claim (``claim.statements.PENDING_QUEUES``). Replaces the functions
only: no table or index changes. Reversed, the functions keep their new text,
which claims the same runs."""

from __future__ import annotations

from django.db import migrations

from orchestration.claim import functions
from orchestration.online_migrations import WithLockTimeout

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "b87645d375fdcf5e"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0031_workflows_paused_status")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

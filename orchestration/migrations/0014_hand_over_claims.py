"""``orchestration_complete_and_claim_counted`` hands over the slots of the runs
it completes without the queue's lock (see ``orchestration.claim.functions``); the
other functions are created again as they are. Reversed, the function keeps
its new body, which claims within the same limits."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "890dc63a2c4120ba"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0013_limit_aware_claim_functions")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

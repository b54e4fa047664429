"""``orchestration_complete_and_claim_counted`` counts a queue's running runs
once a claim in a lane, not twice, while its backend's last count found the
queue far from its limit (see ``orchestration.claim.functions``); the other
functions are created again as they are. Reversed, the function keeps its new
body, which claims within the same limits."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "58fe9c38311960a0"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0016_claims_in_lanes")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

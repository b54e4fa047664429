"""The limit-aware claims, each with its lock, as functions
``orchestration_complete_and_claim_counted`` and
``orchestration_complete_and_claim_limited`` (see ``orchestration.claim.functions``);
the other functions are created again as they are."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: The functions this migration adds.
NAMES = ("orchestration_complete_and_claim_counted", "orchestration_complete_and_claim_limited")
#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "06295521a8662e96"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0012_hot_path_functions")]

    operations = [
        WithLockTimeout(migrations.RunSQL(functions.create_functions(), functions.drop_functions(*NAMES)))
    ]

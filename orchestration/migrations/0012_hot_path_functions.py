"""The worker's hot statements as functions, ``orchestration_fenced_write``
and ``orchestration_complete_and_claim`` (see ``orchestration.claim.functions``)."""

from __future__ import annotations

from django.db import migrations

from orchestration.online_migrations import WithLockTimeout

from orchestration.claim import functions

#: The functions this migration creates.
NAMES = ("orchestration_fenced_write", "orchestration_complete_and_claim")
#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "c1ad04ca8860bf25"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0011_console_error_history")]

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(*NAMES), functions.drop_functions(*NAMES)))]

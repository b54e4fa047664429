"""Every function gets ``SET enable_sort = off`` again (0021 took it off, no plan
test showing a plan it kept out): the runs whose wait has passed are read from
``idx_workflows_waiting`` in ``run_after`` order, never from an index of every
pending run with each heap row fetched and sorted, which a table analysed
while nothing was pending made look as cheap; and every function, the plain
claim too, runs with JIT off (the price of a disabled sort, which every plan
pays, would pass ``jit_above_cost``; see ``claim.statements.INDEX_PLANS_ONLY``). Replaces the functions only: no table
or index changes. Reversed, the functions keep their new text, which claims
the same runs."""

from __future__ import annotations

from django.db import migrations

from orchestration.claim import functions
from orchestration.online_migrations import WithLockTimeout

#: ``functions.fingerprint()`` of the text this migration was written for.
FUNCTIONS_FINGERPRINT = "bdda3c662ec33d23"


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0028_workflows_tags")]  # after main's 0027-0030, which took 0025 as theirs

    operations = [WithLockTimeout(migrations.RunSQL(functions.create_functions(), migrations.RunSQL.noop))]

"""Django's ``migrate``, ending with one line when the database is unavailable.

The app overrides the command only for that (``management.outage``);
everything else is Django's own.
"""

from __future__ import annotations

from django.core.management.commands import migrate

from orchestration.management.outage import ReportsOutages


class Command(ReportsOutages, migrate.Command):
    database_option = "database"

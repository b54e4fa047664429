"""A database outage ends a management command with one line, not a traceback.

``CommandError`` is how Django's ``manage.py`` reports a failure in one line
(``CommandError: ...`` on stderr, a non-zero exit status); an operator whose
database is down or unreachable is told which database (``host:port/name``,
never the password) and why, as ``outages.unavailable`` words it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import conf
from ..outages import is_outage, unavailable


class ReportsOutages(BaseCommand):
    """A command whose database outage is a ``CommandError`` naming the database."""

    #: The option that names the command's database alias (``migrate``'s
    #: ``--database``); None: ``ORCHESTRATION["DATABASE"]``.
    database_option: str | None = None

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except Exception as exc:
            if not is_outage(exc):
                raise
            alias = options.get(self.database_option) if self.database_option else None
            raise CommandError(unavailable(alias or conf.DATABASE, exc)) from None

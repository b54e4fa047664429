"""One of the benchmark's worker processes, started by ``workers.Workers`` as
``python -m project.benchmark.worker_process ALIAS DATABASE [runworkers options]``.

It is ``manage.py runworkers`` (the same command, worker, options and system
checks, in the project's own settings) with only what the benchmark needs
changed: ALIAS points at the scratch DATABASE; DEBUG is off, as deployed (with
it, Django keeps every query of every thread in memory); the project's
schedules are off (their runs would land in the scratch database and its code
would run during the measurements); and the benchmark's workflow type is
registered, which only these processes and the command itself do.
"""

from __future__ import annotations

import sys

import django
from django.conf import settings
from django.core.management import execute_from_command_line

from .workflows import register


def set_up(alias: str, database: str) -> None:
    """Django, with ``alias`` pointing at the scratch ``database``, and the benchmark's workflows."""
    # Before django.setup(), so that no connection has been made with the project's database name.
    settings.DATABASES[alias]["NAME"] = database
    settings.DEBUG = False
    settings.ORCHESTRATION = {**(getattr(settings, "ORCHESTRATION", None) or {}), "SCHEDULER": False}
    django.setup()
    register()


def main(argv: list[str]) -> None:
    alias, database, *options = argv
    set_up(alias, database)
    execute_from_command_line([sys.argv[0], "runworkers", *options])


if __name__ == "__main__":
    main(sys.argv[1:])

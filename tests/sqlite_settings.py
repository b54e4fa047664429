"""The test settings on a SQLite database (``SQLITE_PATH``): what a project
that forgot PostgreSQL runs ``migrate`` with. With ``QUEUE_ON_POSTGRESQL`` set,
the app's tables are routed to the test settings' PostgreSQL alias ``queue``
instead, as ``ORCHESTRATION["DATABASE"]`` and the router allow."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, ORCHESTRATION

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SQLITE_PATH"]},
    "queue": DATABASES["default"],
}
if os.environ.get("QUEUE_ON_POSTGRESQL"):
    ORCHESTRATION = {**ORCHESTRATION, "DATABASE": "queue"}
    DATABASE_ROUTERS = ["orchestration.routers.OrchestrationRouter"]

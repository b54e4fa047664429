"""The engine's one clock: the database server's.

Every moment the engine compares with another is of PostgreSQL's clock, the
clock the claim judges due-ness by (``run_after <= statement_timestamp()``):
a timer's end and an event's time limit are written from it and checked
against it, and so are deadlines, debounce windows and schedules' ticks. A
worker or web server whose own clock is off (by seconds, or by hours) then
never ends a timer early nor claims a waiting run again and again.

Timers read the database's clock each time (``database_now``): the few reads
they cost are what "never early" takes. The checks made at every step (a
deadline) take the last reading advanced by the monotonic clock (``now``),
read again every ``REREAD`` seconds, so that a step costs no extra round trip.
The machine's wall clock is never read for a comparison: it may jump.
"""

from __future__ import annotations

import datetime
import time

from django.db import connections
from django.utils import timezone

from .conf import conf
from .moments import as_django

#: The database's clock: the moment this statement started, as the claim's
#: ``run_after <= statement_timestamp()`` reads it.
DATABASE_NOW = "SELECT statement_timestamp()"
#: How long ``now`` advances a reading of the database's clock by the monotonic clock (seconds).
REREAD = 60.0

# (time.monotonic() half-way through the read, the database's clock read); shared by the
# process's threads, each assignment replacing the tuple whole.
_last_read: tuple[float, datetime.datetime] | None = None


def database_now(alias: str | None = None) -> datetime.datetime:
    """The database's clock now, read with one query; aware (UTC), or naive
    in ``TIME_ZONE`` with ``USE_TZ = False``, as ``timezone.now()`` and the
    ORM's values are."""
    global _last_read
    before = time.monotonic()
    with connections[alias or conf.DATABASE].cursor() as cursor:
        cursor.execute(DATABASE_NOW)
        read: datetime.datetime = cursor.fetchone()[0]
    if timezone.is_naive(read):  # USE_TZ = False: the connection's time zone is TIME_ZONE
        read = timezone.make_aware(read)
    read = read.astimezone(datetime.UTC)
    _last_read = ((before + time.monotonic()) / 2, read)
    return as_django(read)


def now(*, reread: bool = True) -> datetime.datetime:
    """The database's clock now (as ``database_now``): its last reading advanced
    by the monotonic clock, or a new reading when that one is older than ``REREAD``.

    ``reread=False`` makes no query, for an event loop, where none may run:
    the last reading however old (the engine's calls off the loop read it
    again), or the local clock before the first."""
    last = _last_read
    if last is None or time.monotonic() - last[0] > REREAD:
        if reread:
            return database_now()
        if last is None:
            return timezone.now()
    return as_django(last[1] + datetime.timedelta(seconds=time.monotonic() - last[0]))

"""Health checks for supervisors: ``manage.py workflows health`` and ``health_view``.

Each check answers one question a probe asks, and fails for its own reason:

- ``database``: the database answers within the timeout;
- ``migrations``: every migration of ``orchestration`` this code ships is
  applied, and the database records none this code does not know (a database
  migrated by a newer release);
- ``worker`` (asked for one, or for the processes of this host): it
  heartbeated within ``STUCK_AFTER``, was not marked gone by the stuck sweep,
  and is not stopping.

The checks run on a connection of their own, opened with libpq's
``connect_timeout`` (a database that does not answer is a failed check, not a
hung probe), in one read-only transaction whose statements PostgreSQL cancels
at the timeout. They read ``django_migrations`` and ``workflow_workers``, two
small tables, by name or key: never ``workflows``, so a probe costs the same
on any size of table, and many pods may run it every few seconds.
"""

from __future__ import annotations

import math
import os
import pkgutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from .conf import conf
from .outages import cause, database_name

APP = "orchestration"

#: Seconds each check may take (``--timeout``), connecting included.
TIMEOUT = 5.0


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``ok``, and one line saying why."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_checks(
    *,
    timeout: float = TIMEOUT,
    migrations: bool = True,
    worker: str | None = None,
    this_host: bool = False,
    alias: str | None = None,
) -> list[Check]:
    """The database check, then (when it passed) the migrations check and the
    worker checks asked for: one for ``worker``, one for each ``runworkers``
    process of this host with ``this_host``."""
    alias = alias or conf.DATABASE
    started = time.monotonic()
    try:
        connection = _connect(alias, timeout)
    except psycopg.Error as exc:
        return [Check("database", False, f"{database_name(alias)} did not answer: {cause(exc)}")]
    with connection:
        try:
            with connection.cursor() as cursor:
                _read_only(cursor, timeout)
                cursor.execute("SELECT 1")
        except psycopg.Error as exc:
            return [Check("database", False, f"{database_name(alias)} did not answer: {cause(exc)}")]
        took = (time.monotonic() - started) * 1000
        checks = [Check("database", True, f"{database_name(alias)} answered in {took:.0f} ms")]
        if migrations:
            checks += _in_own_transaction(connection, timeout, "migrations", lambda cursor: [_migrations(cursor)])
        if worker is not None:
            checks += _in_own_transaction(connection, timeout, "worker", lambda cursor: [_worker(cursor, worker)])
        if this_host:
            checks += _in_own_transaction(connection, timeout, "worker", lambda cursor: list(_this_host(cursor)))
    return checks


def _connect(alias: str, timeout: float) -> psycopg.Connection[Any]:
    """A connection of the checks' own, with the alias's parameters; libpq
    counts ``connect_timeout`` in whole seconds, at least 2."""
    params = connections[alias].get_connection_params()
    for key in ("cursor_factory", "context"):  # Django's, for its own wrapper
        params.pop(key, None)
    params["connect_timeout"] = max(2, math.ceil(timeout))
    return psycopg.connect(**params)


def _read_only(cursor: psycopg.Cursor[Any], timeout: float) -> None:
    cursor.execute("SET TRANSACTION READ ONLY")
    cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(max(1, round(timeout * 1000)))])


def _in_own_transaction(
    connection: psycopg.Connection[Any],
    timeout: float,
    name: str,
    checks: Callable[[psycopg.Cursor[Any]], list[Check]],
) -> list[Check]:
    """``checks`` in a read-only transaction of their own: one that fails (a
    column a later migration adds, a timeout) leaves the others theirs."""
    try:
        with connection.cursor() as cursor:
            _read_only(cursor, timeout)
            found = checks(cursor)
        connection.commit()
        return found
    except psycopg.Error as exc:
        connection.rollback()
        return [Check(name, False, f"could not be read: {cause(exc)}")]


# -- migrations --------------------------------------------------------------------


def known_migrations() -> set[str]:
    """The names of the migrations of ``orchestration`` that this code ships."""
    from . import migrations

    return {module.name for module in pkgutil.iter_modules(migrations.__path__) if not module.name.startswith("_")}


def _migrations(cursor: psycopg.Cursor[Any]) -> Check:
    cursor.execute("SELECT to_regclass('django_migrations') IS NOT NULL")
    row = cursor.fetchone()
    if not row or not row[0]:
        return Check("migrations", False, "no migration is recorded: run manage.py migrate")
    cursor.execute("SELECT name FROM django_migrations WHERE app = %s", [APP])
    applied = {name for (name,) in cursor.fetchall()}
    known = known_migrations()
    unknown, unapplied = sorted(applied - known), sorted(known - applied)
    if unknown:
        return Check(
            "migrations",
            False,
            f"the database was migrated by a newer release of orchestration: {', '.join(unknown)} "
            "unknown to this code (deploy that release here)",
        )
    if unapplied:
        return Check("migrations", False, f"not applied: {', '.join(unapplied)} (run manage.py migrate)")
    return Check("migrations", True, f"all {len(known)} applied, the last {max(known)}")


# -- workers -------------------------------------------------------------------------

WORKER_COLUMNS = """
SELECT id, pid, gone_at IS NOT NULL, EXTRACT(EPOCH FROM now() - stopping_since),
       EXTRACT(EPOCH FROM now() - last_seen_at)
FROM workflow_workers
"""


def _worker(cursor: psycopg.Cursor[Any], worker_id: str) -> Check:
    cursor.execute(WORKER_COLUMNS + "WHERE id = %s", [worker_id])
    row = cursor.fetchone()
    if row is None:
        return Check("worker", False, f"no worker {worker_id} is registered (it stopped, or never started)")
    return _judged(row)


def _this_host(cursor: psycopg.Cursor[Any]) -> Iterator[Check]:
    """The newest row of each process of this host still running here: a
    container restarted under the same host name and pid leaves its older rows
    behind, and a process that ended leaves one until the sweep deletes it."""
    host = socket.gethostname()[:255]
    cursor.execute(WORKER_COLUMNS + "WHERE host = %s ORDER BY started_at DESC", [host])
    rows, pids = [], set()
    for row in cursor.fetchall():
        if row[1] not in pids and _running_here(row[1]):
            pids.add(row[1])
            rows.append(row)
    if not rows:
        yield Check("worker", False, f"no runworkers process of this host ({host}) is registered")
    for row in rows:
        yield _judged(row)


def _running_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def _judged(row: tuple[Any, ...]) -> Check:
    worker_id, _, gone, stopping_for, silent_for = row
    if gone:
        return Check(
            "worker",
            False,
            f"{worker_id} was marked gone (quarantined) by the stuck sweep: its runs were given to other workers",
        )
    if stopping_for is not None:
        return Check("worker", False, f"{worker_id} is stopping (for {float(stopping_for):.0f} s)")
    if silent_for > conf.STUCK_AFTER:
        return Check(
            "worker",
            False,
            f"{worker_id}: no heartbeat for {float(silent_for):.0f} s (STUCK_AFTER {conf.STUCK_AFTER:g} s): "
            "hung, or cut off from the database",
        )
    return Check("worker", True, f"{worker_id}: heartbeat {float(silent_for):.0f} s ago")


# -- the web side ------------------------------------------------------------------


@never_cache
@require_safe
def health_view(request: HttpRequest) -> HttpResponse:
    """200 when the database answers and its migrations match this code, 503
    otherwise. The body names the checks and whether each passed, never why
    (a host name, a migration's name): mount it where anyone may ask.
    ``path("health/", health_view)`` in ``urls.py``; nothing mounts it by default."""
    checks = run_checks()
    healthy = all(check.ok for check in checks)
    passed = {check.name: "ok" if check.ok else "failed" for check in checks}
    body = {"status": "ok" if healthy else "unavailable", "checks": passed}
    return JsonResponse(body, status=200 if healthy else 503)

"""Which database errors are an outage, and how to name the database in one line.

An outage is the database being unreachable or refusing writes for a while:
the connection was lost or cannot be made, the server is shutting down or not
accepting connections yet, or the session is read-only (a failover's switch,
a standby, ``default_transaction_read_only``). Whoever met it waits and tries
the same thing again, on a new connection: nothing is wrong with the work.
Every other database error belongs to what was being done (a run's step, an
operator's command) and is handled as that thing's error.

This module is the one place that decides it (``is_outage``): the worker's
claim loop, its fenced writes (``lease.OutagePolicy``) and the commands all ask here.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import Error as DjangoDatabaseError
from django.db import InterfaceError, OperationalError, connections

#: SQLSTATEs of an outage outside class 08 (connection exception), each a
#: server that is there but will not do the work now.
OUTAGE_SQLSTATES = frozenset(
    {
        "25006",  # read_only_sql_transaction: a standby, or a server switching over
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: starting up, in recovery
        "53300",  # too_many_connections
    }
)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error, Django's (whose cause is psycopg's) or psycopg's own."""
    for error in (exc, exc.__cause__):
        state = getattr(error, "sqlstate", None)
        if state:
            return str(state)
    return None


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unavailable or refuses writes for
    now, rather than that the statement itself failed."""
    if isinstance(exc, InterfaceError | psycopg.InterfaceError):
        return True  # the connection is closed or broken
    if not isinstance(exc, DjangoDatabaseError | psycopg.Error):
        return False
    state = sqlstate(exc)
    if state is None:
        # No answer from a server: connecting failed, or the connection broke
        # mid-statement (libpq's error for a result cut short has no SQLSTATE,
        # so psycopg raises its base DatabaseError for it).
        if isinstance(exc, OperationalError | psycopg.OperationalError):
            return True
        return any(type(error) is psycopg.DatabaseError for error in (exc, exc.__cause__))
    return state.startswith("08") or state in OUTAGE_SQLSTATES


def database_name(alias: str) -> str:
    """The database of ``alias`` as ``host:port/name`` (never its password), for messages."""
    params: dict[str, Any] = connections[alias].settings_dict
    hosts = str(params.get("HOST") or "localhost").split(",")
    ports = str(params.get("PORT") or "5432").split(",")
    if len(ports) != len(hosts):  # a multi-host URL with one port for all
        ports = ports[:1] * len(hosts)
    return ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True)) + f"/{params.get('NAME')}"


def cause(exc: BaseException) -> str:
    """The error's first line, for a message of one line (psycopg adds hints below it)."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def unavailable(alias: str, exc: BaseException) -> str:
    """One line: which database could not be used, and why."""
    return f"database {database_name(alias)} (alias {alias!r}) is unavailable: {cause(exc)}"

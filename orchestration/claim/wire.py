"""How the hot statements reach the server: ``run``, beneath Django's cursor
wrapper, on a ``psycopg.RawCursor`` of the server connection. The claims, the
fenced write and ``start_workflow``'s INSERT go this way.

A raw cursor takes PostgreSQL's own ``$n`` placeholders, so psycopg does not
convert the statement's text at each execution: ``positional`` converts each
statement once. It is prepared at its first execution when the connection
prepares (``prepare_threshold`` not None; else sent unnamed each time, as
behind PgBouncer in transaction mode), in psycopg's own, bounded, cache of
prepared statements.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg
from django.db import connections

_PLACEHOLDER = re.compile(r"%\((\w+)\)(.)|%(.)")


class Statements:
    """A server connection's raw cursor (``raw``), which ``run`` executes on,
    and its Django-wrapped cursor (``cursor``) for ``execute_wrapper()``s."""

    def __init__(self, connection: psycopg.Connection[Any], cursor: Any) -> None:
        self.connection = connection
        self.cursor = cursor
        self.raw = psycopg.RawCursor(connection)

    def run(self, statement: str, params: Any) -> list[tuple[Any, ...]]:
        raw = self.raw
        if params is None:  # as psycopg sends it: no placeholders read
            raw.execute(statement, prepare=True)
        else:
            query, order = positional(statement)
            raw.execute(
                query, [params[name] for name in order] if isinstance(params, Mapping) else params, prepare=True
            )
        return raw.fetchall()


_converted: dict[str, tuple[str, tuple[Any, ...]]] = {}


def positional(statement: str) -> tuple[str, tuple[Any, ...]]:
    """``statement`` with PostgreSQL's ``$n`` for psycopg's ``%s`` and
    ``%(name)s`` placeholders, and the parameters in their order (names for
    ``%(name)s``, one ``$n`` a name however often it appears; positions for
    ``%s``; ``%%`` is ``%``). Any other placeholder (``%b``, ``%t``) is refused:
    a raw cursor binds every parameter in one format."""
    converted = _converted.get(statement)
    if converted is None:
        numbers: dict[Any, int] = {}

        def number(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            kind = match.group(2) if match.group(1) is not None else match.group(3)
            if kind != "s":
                raise ValueError(f"{match.group(0)!r}: only %s and %(name)s placeholders run on a raw cursor")
            key = match.group(1) if match.group(1) is not None else len(numbers)
            if key not in numbers:
                numbers[key] = len(numbers) + 1
            return f"${numbers[key]}"

        query = _PLACEHOLDER.sub(number, statement)
        converted = _converted[statement] = (query, tuple(numbers))
    return converted


def run(alias: str, statement: str, params: Any) -> list[tuple[Any, ...]]:
    """Execute ``statement`` and return its rows.

    With server-side binding, prepared when the connection's
    ``prepare_threshold`` is set (Django's ``OPTIONS``; Django's default,
    None, prepares nothing, as PgBouncer in transaction mode needs).

    On an open connection with no ``execute_wrapper()`` and no query log, the
    statement goes beneath Django's cursor wrapper, with what it would add
    (its check of a broken transaction, its error classes), to the connection's
    raw cursor (``Statements``): Python a hot statement no longer runs
    (docs/performance.md).
    """
    connection = connections[alias]
    if connection.connection is None or connection.execute_wrappers or connection.queries_logged:
        return _run_wrapped(connection, statement, params)
    statements = _statements(connection)
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        return statements.run(statement, params)


def _run_wrapped(connection: Any, statement: str, params: Any) -> list[tuple[Any, ...]]:
    """``run`` through Django's cursor wrapper: it connects, and applies the
    ``execute_wrapper()``s and DEBUG's query log."""
    connection.ensure_connection()
    if connection.queries_logged:
        raw: Any = psycopg.Cursor(connection.connection)  # django-stubs expects a wrapper here
        with connection.make_debug_cursor(raw) as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()
    cursor = _statements(connection).cursor
    cursor.execute(statement, params)
    return cursor.fetchall()


def _statements(connection: Any) -> Statements:
    """What ``run`` executes with, made once per server connection (and thread:
    Django's connections are the thread's own): making a cursor is about a
    fifth of a short statement's Python (docs/performance.md)."""
    made = connection.__dict__.get("_orchestration_statements")
    if made is None or made.connection is not connection.connection:
        server = connection.connection
        made = Statements(server, connection.make_cursor(psycopg.Cursor(server)))
        connection._orchestration_statements = made
    return made

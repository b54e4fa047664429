"""How the hot statements reach the server: ``run``, beneath Django's cursor
wrapper and, outside a transaction, beneath psycopg's cursor too, on the
server connection itself (psycopg's ``PGconn``). The claims, the fenced
write and ``start_workflow``'s INSERT go this way.

A cursor's ``execute`` and ``fetchall`` run about two hundred lines of Python
a statement (its generators, query conversion, prepared-statement
bookkeeping, result checks), three times the CPU of the round trip's own
work in libpq (docs/performance.md). ``Statements.run`` does what they do
for a statement outside a transaction: the parameters dumped and the rows
loaded by psycopg's own ``Transformer`` (so with the types and values the
cursor would give them), the statement prepared once per server connection
when the connection prepares (``prepare_threshold`` not None; else sent
unnamed each time, as behind PgBouncer in transaction mode), and an error
raised as psycopg's class for its SQLSTATE.

Only where the cursor would add nothing: in autocommit mode with no
transaction open. Inside a transaction the cursor runs it (it begins the
transaction where Django's ``atomic`` has not yet, and a rollback there makes
psycopg deallocate every prepared statement, its own and these).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from django.db import connections
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

_RESULTS = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
#: A prepared statement the server does not have (a ``DEALLOCATE ALL`` since).
_UNKNOWN_STATEMENT = b"26000"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")
#: Prepared statements' numbers, unique in the process (so also on a server
#: connection that two ``Statements`` share).
_names = itertools.count()


class Statements:
    """A server connection's statements run beneath the cursor, and its cursor
    (``cursor``, Django's wrapper of a psycopg cursor) for the others."""

    def __init__(self, connection: psycopg.Connection[Any], cursor: Any) -> None:
        self.connection = connection
        self.cursor = cursor
        self._transformer = Transformer(connection)
        self._prepared: dict[tuple[str, tuple[int, ...]], bytes] = {}

    def run(self, statement: str, params: Any) -> list[tuple[Any, ...]]:
        connection = self.connection
        pgconn = connection.pgconn
        if not connection.autocommit or pgconn.transaction_status != pq.TransactionStatus.IDLE:
            raw = self.cursor.cursor
            raw.execute(statement, params)
            return raw.fetchall()
        transformer = self._transformer
        if params is None:  # as psycopg sends it: no placeholders read
            query, values = statement.encode(), transformer.dump_sequence((), ())
        else:
            query, order, formats = positional(statement)
            values = transformer.dump_sequence(
                [params[name] for name in order] if isinstance(params, Mapping) else params, formats
            )
        if connection.prepare_threshold is None:
            result = pgconn.exec_params(query, values, transformer.types, transformer.formats)
        else:
            result = self._exec_prepared(statement, query, values)
        _check(pgconn, result)
        transformer.set_pgresult(result)
        return transformer.load_rows(0, result.ntuples, tuple)

    def _exec_prepared(self, statement: str, query: bytes, values: Sequence[Any]) -> pq.abc.PGresult:
        pgconn, transformer = self.connection.pgconn, self._transformer
        key = (statement, tuple(transformer.types or ()))
        for _ in range(2):
            name = self._prepared.get(key)
            if name is None:
                name = f"orchestration_{next(_names)}".encode()
                _check(pgconn, pgconn.prepare(name, query, transformer.types))
                self._prepared[key] = name
            result = pgconn.exec_prepared(name, values, transformer.formats)
            if (
                result.status != pq.ExecStatus.FATAL_ERROR
                or result.error_field(pq.DiagnosticField.SQLSTATE) != _UNKNOWN_STATEMENT
            ):
                return result
            self._prepared.clear()  # deallocated (outside a transaction, so nothing was aborted): again
        return result


def _check(pgconn: pq.abc.PGconn, result: pq.abc.PGresult) -> None:
    """Raise what psycopg's cursor raises for a failed ``result``."""
    if result.status in _RESULTS:
        return
    encoding = psycopg.ConnectionInfo(pgconn).encoding  # its fallback too, where the server named none
    if pgconn.status == pq.ConnStatus.BAD:
        raise psycopg.OperationalError(result.get_error_message(encoding) or "the server connection was lost")
    raise errors.error_from_result(result, encoding=encoding)


_converted: dict[str, tuple[bytes, tuple[Any, ...], list[PyFormat]]] = {}


def positional(statement: str) -> tuple[bytes, tuple[Any, ...], list[PyFormat]]:
    """``statement`` with PostgreSQL's ``$n`` for psycopg's placeholders, the
    parameters in their order (names for ``%(name)s``, one ``$n`` a name however
    often it appears; positions for ``%s``; ``%%`` is ``%``), and their formats
    (psycopg's choice for each value, as ``%s`` asks)."""
    converted = _converted.get(statement)
    if converted is None:
        numbers: dict[Any, int] = {}

        def number(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            key = match.group(1) if match.group(1) is not None else len(numbers)
            if key not in numbers:
                numbers[key] = len(numbers) + 1
            return f"${numbers[key]}"

        query = _PLACEHOLDER.sub(number, statement).encode()
        converted = _converted[statement] = (query, tuple(numbers), [PyFormat.AUTO] * len(numbers))
    return converted


def run(alias: str, statement: str, params: Any) -> list[tuple[Any, ...]]:
    """Execute ``statement`` and return its rows.

    With server-side binding, prepared when the connection's
    ``prepare_threshold`` is set (Django's ``OPTIONS``; Django's default,
    None, prepares nothing, as PgBouncer in transaction mode needs).

    On an open connection with no ``execute_wrapper()`` and no query log, the
    statement goes beneath Django's cursor wrapper, with what it would add
    (its check of a broken transaction, its error classes): outside a
    transaction to the server connection itself (``Statements``), inside one to
    psycopg's cursor. Each layer skipped is Python a hot statement no longer
    runs (docs/performance.md).
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

"""The hot statements sent on the server connection itself (psycopg's
``PGconn``), beneath psycopg's cursor.

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

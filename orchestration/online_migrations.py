"""Migration operations for a database that serves while it migrates.

A release's ``migrate`` runs while the previous release's web servers and
workers keep writing (docs/how-to/upgrading.md). What is safe on a busy table:

- ``WithLockTimeout``: statements that need a strong lock only for a moment
  (``ADD COLUMN`` without a volatile default, ``CREATE TRIGGER``, a rename).
  Waiting for that lock is the danger: every statement on the table queues
  behind the waiting one. They run in a short transaction of their own with
  ``lock_timeout`` and ``statement_timeout``, and on a lock timeout the
  transaction is rolled back (the queue behind it drains) and tried again a
  little later.
- ``CreateIndexConcurrently``, ``DropIndexConcurrently``: writes go on while
  they run, in a non-atomic migration. ``IF [NOT] EXISTS``, an invalid index a
  failed build left dropped first, and ``AddField`` skipping a column already
  there: a non-atomic migration that stopped part way runs again from its start.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import OperationalError, migrations, router, transaction
from django.db.migrations.operations.base import Operation

from .outages import sqlstate

logger = logging.getLogger(__name__)

#: How long a statement may wait for its lock. Everything that touches the
#: table after it waits as long, so this bounds the stall a migration causes.
LOCK_TIMEOUT = "300ms"
#: How long a statement of ``WithLockTimeout`` may run once it holds its lock.
STATEMENT_TIMEOUT = "5s"
#: Attempts of a ``WithLockTimeout`` before ``migrate`` fails (about 3 minutes
#: of backing off); running ``migrate`` again takes up from there.
ATTEMPTS = 30
#: Bounds of the pause between two attempts, in seconds (doubled each time).
BACKOFF = (0.2, 10.0)

#: SQLSTATE of an expired lock_timeout (``lock_not_available``).
LOCK_NOT_AVAILABLE = "55P03"


class WithLockTimeout(Operation):
    """Run ``operations`` in one short transaction with ``lock_timeout`` (and
    ``statement_timeout``, ``"0"`` for none), retried while their lock is
    not granted in time.

    In a non-atomic migration the transaction is their own; in an atomic one it
    is a savepoint, so such a migration must take no other strong lock before
    it (a retry would hold that lock while it backs off)."""

    reduces_to_sql = True

    def __init__(self, *operations: Operation, statement_timeout: str = STATEMENT_TIMEOUT) -> None:
        self.operations = list(operations)
        self.statement_timeout = statement_timeout

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {} if self.statement_timeout == STATEMENT_TIMEOUT else {"statement_timeout": self.statement_timeout}
        return self.__class__.__qualname__, self.operations, kwargs

    @property
    def reversible(self) -> bool:  # type: ignore[override]
        return all(operation.reversible for operation in self.operations)

    def describe(self) -> str:
        return f"With lock_timeout {LOCK_TIMEOUT}: " + "; ".join(op.describe() for op in self.operations)

    def state_forwards(self, app_label: str, state: Any) -> None:
        for operation in self.operations:
            operation.state_forwards(app_label, state)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        def forwards() -> None:
            state = from_state
            for operation in self.operations:
                after = state.clone()
                operation.state_forwards(app_label, after)
                operation.database_forwards(app_label, schema_editor, state, after)
                state = after

        self._in_short_transaction(app_label, schema_editor, forwards)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        def backwards() -> None:
            states = [to_state]
            for operation in self.operations[:-1]:
                states.append(states[-1].clone())
                operation.state_forwards(app_label, states[-1])
            after = from_state
            for operation, before in zip(reversed(self.operations), reversed(states), strict=True):
                operation.database_backwards(app_label, schema_editor, after, before)
                after = before

        self._in_short_transaction(app_label, schema_editor, backwards)

    def _in_short_transaction(self, app_label: str, schema_editor: Any, operations: Callable[[], None]) -> None:
        if not applies(schema_editor, app_label):  # the operations skip themselves; no SET for another database
            operations()
            return

        def run() -> None:
            # What the operations defer to the migration's end (a new table's
            # indexes and constraints) is theirs: it runs in their transaction.
            before = len(schema_editor.deferred_sql)
            try:
                operations()
                deferred = schema_editor.deferred_sql[before:]
            finally:
                del schema_editor.deferred_sql[before:]
            for statement in deferred:
                schema_editor.execute(statement)

        timeouts = (
            f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'",
            f"SET LOCAL statement_timeout = '{self.statement_timeout}'",
        )
        if schema_editor.collect_sql:  # sqlmigrate: the statements as they run
            own = not schema_editor.atomic_migration
            if own:
                schema_editor.collected_sql.append("BEGIN;")
            for statement in timeouts:
                schema_editor.execute(statement)
            run()
            if own:
                schema_editor.collected_sql.append("COMMIT;")
            return

        def attempt() -> None:
            with transaction.atomic(using=schema_editor.connection.alias):
                for statement in timeouts:
                    schema_editor.execute(statement)
                run()

        retried(self.describe(), attempt)


def retried(what: str, attempt: Callable[[], None]) -> None:
    """``attempt()``, again after a pause while it fails for a lock not granted in time."""
    for number in range(1, ATTEMPTS + 1):
        try:
            attempt()
            return
        except OperationalError as error:
            if not lock_not_available(error) or number == ATTEMPTS:
                raise
            pause = min(BACKOFF[0] * 2 ** (number - 1), BACKOFF[1]) * random.uniform(0.5, 1.0)
            logger.warning(
                "Migration: %s: lock not granted within %s (attempt %d of %d), trying again in %.1f s",
                what,
                LOCK_TIMEOUT,
                number,
                ATTEMPTS,
                pause,
            )
            time.sleep(pause)


def applies(schema_editor: Any, app_label: str) -> bool:
    """Whether this database takes the app's tables: the router's word (a
    project may keep them on another database), and PostgreSQL's SQL only."""
    connection = schema_editor.connection
    return connection.vendor == "postgresql" and router.allow_migrate(connection.alias, app_label)


def lock_not_available(error: BaseException) -> bool:
    """Whether ``error`` is an expired ``lock_timeout``."""
    return sqlstate(error) == LOCK_NOT_AVAILABLE


class CreateIndexConcurrently(Operation):
    """``CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS`` ``name`` (``sql``,
    which must say so), with ``state_operations`` telling Django's state of it
    (an ``AddIndex`` or ``AddConstraint``; none for an index Django cannot
    express). For a non-atomic migration. An invalid index of that name (a
    build that failed, or was interrupted) is dropped first and built again."""

    atomic = False
    reduces_to_sql = True
    reversible = True

    def __init__(self, name: str, sql: str, state_operations: Sequence[Operation] = ()) -> None:
        if "CONCURRENTLY IF NOT EXISTS" not in sql:
            raise ValueError(f"The index {name} must be built CONCURRENTLY IF NOT EXISTS: {sql}")
        self.name = name
        self.sql = sql
        self.state_operations = list(state_operations)

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__qualname__, [self.name, self.sql], {"state_operations": self.state_operations}

    def describe(self) -> str:
        return f"Create index {self.name} concurrently"

    def state_forwards(self, app_label: str, state: Any) -> None:
        for operation in self.state_operations:
            operation.state_forwards(app_label, state)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if not applies(schema_editor, app_label):
            return
        if not schema_editor.collect_sql:
            drop_if_invalid(schema_editor, self.name)
        schema_editor.execute(self.sql)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if applies(schema_editor, app_label):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.name)}")


class AddField(migrations.AddField):
    """Django's ``AddField``, skipped where the column is there already: a
    non-atomic migration stopped part way through (a lock not granted in all
    its attempts) then runs again from the start."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        column = model._meta.get_field(self.name).column
        if not schema_editor.collect_sql and self.allow_migrate_model(schema_editor.connection.alias, model):
            with schema_editor.connection.cursor() as cursor:
                columns = schema_editor.connection.introspection.get_table_description(cursor, model._meta.db_table)
            if any(info.name == column for info in columns):
                return
        super().database_forwards(app_label, schema_editor, from_state, to_state)


def drop_if_invalid(schema_editor: Any, name: str) -> None:
    """Drop index ``name`` if a build that failed left it invalid: ``IF NOT EXISTS``
    would keep it, and PostgreSQL would write to it and never read it."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [schema_editor.quote_name(name)]
        )
        row = cursor.fetchone()
    if row and row[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")


class DropIndexConcurrently(Operation):
    """``DROP INDEX CONCURRENTLY IF EXISTS`` ``name``, for a non-atomic migration;
    backwards, ``create`` (which must be ``CONCURRENTLY IF NOT EXISTS``). It cannot
    run in a transaction, so its ``lock_timeout`` is set for the session, and
    reset after it."""

    atomic = False
    reduces_to_sql = True
    reversible = True

    def __init__(self, name: str, create: str) -> None:
        if "CONCURRENTLY IF NOT EXISTS" not in create:
            raise ValueError(f"The index {name} must be built again CONCURRENTLY IF NOT EXISTS: {create}")
        self.name = name
        self.create = create

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__qualname__, [self.name, self.create], {}

    def describe(self) -> str:
        return f"Drop index {self.name} concurrently"

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if not applies(schema_editor, app_label):
            return
        drop = f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.name)}"

        def attempt() -> None:
            # No statement_timeout: it waits for every transaction that may read the index.
            schema_editor.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            schema_editor.execute("SET statement_timeout = 0")
            try:
                schema_editor.execute(drop)
            finally:
                schema_editor.execute("RESET lock_timeout")
                schema_editor.execute("RESET statement_timeout")

        if schema_editor.collect_sql:
            attempt()
        else:
            retried(self.describe(), attempt)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if applies(schema_editor, app_label):
            schema_editor.execute(self.create)

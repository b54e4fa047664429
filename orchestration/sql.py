"""The few statements the ORM cannot express, named and kept in one place."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.db import connections

if TYPE_CHECKING:
    from .models import Workflow

#: Channel on which ``start_workflow`` announces new work; the payload is the queue.
NOTIFY_CHANNEL = "orchestration_new_work"

#: Key of the transaction-level advisory lock that lets one process at a time
#: sweep stuck workflows; the others skip the sweep instead of waiting.
RECLAIM_LOCK_KEY = 0x6F7263686573  # "orches"


def notify_new_work(alias: str, queue: str) -> None:
    """Wake idle workers. Inside a transaction Postgres delivers it at commit,
    so a rolled-back start never wakes anyone."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


def listen_statement() -> str:
    return f"LISTEN {NOTIFY_CHANNEL}"


def try_reclaim_lock(alias: str) -> bool:
    """Take the sweep lock for the current transaction, or return False at once."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [RECLAIM_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def insert_workflows(
    alias: str, options: dict[str, Any], ids: list[uuid.UUID], inputs: list[str], keys: list[str | None]
) -> list[Workflow]:
    """``start_workflows`` in one statement: insert a row per ``ids[n]``,
    ``inputs[n]`` (JSON text), ``keys[n]`` and the shared column ``options``;
    skip keys already used; NOTIFY the queue once; return the new rows."""
    from .models import Workflow

    connection = connections[alias]
    quote = connection.ops.quote_name
    fields = Workflow._meta.concrete_fields
    returning = ", ".join(quote(field.column) for field in fields if field.column)
    shared = list(options)
    statement = f"""
        WITH new AS (
            INSERT INTO workflows (id, input_data, idempotency_key, {", ".join(map(quote, shared))})
            SELECT r.id, r.input_data, r.idempotency_key, {", ".join(["%s"] * len(shared))}
            FROM ROWS FROM (unnest(%s::uuid[]), jsonb_array_elements(%s::jsonb), unnest(%s::varchar[]))
                AS r (id, input_data, idempotency_key)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING {returning}
        ), wake AS (
            SELECT pg_notify(%s, %s) WHERE EXISTS (SELECT FROM new)
        )
        SELECT new.* FROM new LEFT JOIN wake ON true
    """
    params = [*options.values(), ids, f"[{','.join(inputs)}]", keys, NOTIFY_CHANNEL, options["queue"]]
    converters = [(n, f.get_db_converters(connection)) for n, f in enumerate(fields) if f.get_db_converters(connection)]
    attnames = [field.attname for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    workflows = []
    for row in rows:
        values = list(row)
        for n, field_converters in converters:
            for convert in field_converters:
                values[n] = convert(values[n], None, connection)
        workflows.append(Workflow.from_db(alias, attnames, values))
    return workflows

"""Writing new runs: their ids, the one INSERT of ``start_workflow(s)``, and the
rows it returns as ``Workflow`` instances.

The options are validated before this module is reached (``api``); here a
batch of any size is one statement, one round trip and, in autocommit mode,
one transaction.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from typing import Any

from django.db import connections
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from . import sql
from .models import Workflow

#: The columns the insert gives each row its own value of (and ``concurrency_key``
#: when the runs of one insert have different ones).
OWN_COLUMNS = ("id", "input_data", "idempotency_key")


def time_ordered_uuid() -> uuid.UUID:
    return time_ordered_uuids(1)[0]


def time_ordered_uuids(count: int) -> list[uuid.UUID]:
    """``count`` UUIDv7 (RFC 9562): 48 bits of Unix time in milliseconds, then 74
    random bits. New runs' rows then land together at the right edge of every
    index keyed by their id, instead of on random pages of it that a large
    table keeps outside the buffer cache. Python has ``uuid.uuid7`` only from 3.14."""
    milliseconds = time.time_ns() // 1_000_000
    version = (milliseconds & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    randomness = os.urandom(10 * count)  # one system call for all
    ids = []
    for start in range(0, 10 * count, 10):
        bits = int.from_bytes(randomness[start : start + 10])
        ids.append(uuid.UUID(int=version | ((bits >> 62) & 0xFFF) << 64 | bits & ((1 << 62) - 1)))
    return ids


def insert(
    alias: str,
    options: dict[str, Any],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None = None,
) -> list[Workflow]:
    """Insert a run per item of the JSON array ``inputs`` (and of ``keys``, and
    of ``concurrency_keys`` if given) with the column values ``options`` they
    share; return the runs in that order. A key used before returns that key's
    run instead: ON CONFLICT DO NOTHING waited for any concurrent insert of it
    to commit, so a later read sees it."""
    ids = time_ordered_uuids(len(keys))
    rows = _insert_rows(alias, options, ids, inputs, keys, concurrency_keys)
    created = {workflow.pk: workflow for workflow in rows}
    by_key: dict[str | None, Workflow] = {w.idempotency_key: w for w in created.values() if w.idempotency_key}
    missing = {key for key, pk in zip(keys, ids, strict=True) if pk not in created and key not in by_key}
    if missing:
        by_key.update((w.idempotency_key, w) for w in Workflow.objects.using(alias).filter(idempotency_key__in=missing))
    return [created.get(pk) or by_key[key] for pk, key in zip(ids, keys, strict=True)]


def _insert_rows(
    alias: str,
    options: dict[str, Any],
    ids: list[uuid.UUID],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None,
) -> list[Workflow]:
    """The new rows: the first comes back whole, the others as their id and key
    (their input is ``inputs``, decoded here), since the rows of one INSERT
    differ in nothing else. (An input's objects come back as ``json`` reads
    them, equal to what jsonb stores; its keys in the order they were sent.)"""
    connection = connections[alias]
    fields = Workflow._meta.concrete_fields
    own = OWN_COLUMNS if concurrency_keys is None else (*OWN_COLUMNS, "concurrency_key")
    statement = _statement(alias, tuple(options), own)
    params = {
        **options,
        "ids": "{" + ",".join(map(str, ids)) + "}",  # arrays as text: psycopg's list dumpers cost more
        "inputs": inputs,
        "keys": json.dumps(keys),
        "channel": sql.NOTIFY_CHANNEL,
        "notify_queue": options["queue"],
    }
    if concurrency_keys is not None:
        params["concurrency_keys"] = json.dumps(concurrency_keys)
    rows = sql.run(alias, statement, params)  # prepared, as the hot path's statements are
    if not rows:
        return []
    attnames = [field.attname for field in fields]
    template = _converted(connection, fields, list(next(row[2:] for row in rows if row[2] is not None)))
    id_at, input_at, key_at = (attnames.index(column) for column in OWN_COLUMNS)
    input_of = dict(zip(ids, json.loads(inputs), strict=True))
    workflows = []
    for workflow_id, key, *_ in rows:
        values = template.copy()
        values[id_at], values[input_at], values[key_at] = workflow_id, input_of[workflow_id], key
        workflows.append(values)
    if concurrency_keys is not None:
        concurrency_key_of = dict(zip(ids, concurrency_keys, strict=True))
        concurrency_key_at = attnames.index("concurrency_key")
        for values in workflows:
            values[concurrency_key_at] = concurrency_key_of[values[id_at]]
    return _as_instances(Workflow, alias, attnames, workflows)


@functools.lru_cache(maxsize=32)
def _statement(alias: str, shared: tuple[str, ...], own: tuple[str, ...] = OWN_COLUMNS) -> str:
    """The insert for the columns ``shared`` by its rows, made once per database
    and set of columns: making it is a fair part of a single start's cost."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    typed = tuple((column, Workflow._meta.get_field(column).db_type(connection) or "") for column in shared)
    returning = ", ".join(quote(field.column) for field in Workflow._meta.concrete_fields if field.column)
    return sql.insert_workflows_statement(own, typed, returning)


def _converted(connection: Any, fields: Any, values: list[Any]) -> list[Any]:
    """A row's values as the model's fields read them (``from_db_value``)."""
    converted = []
    for field, value in zip(fields, values, strict=True):
        for converter in field.get_db_converters(connection):
            value = converter(value, None, connection)
        converted.append(value)
    return converted


def _as_instances(model: Any, alias: str, attnames: list[str], rows: list[list[Any]]) -> list[Any]:
    """``model.from_db`` for each row, without its ``__init__`` where nothing
    can tell the difference: every column is given, the model has no field
    with a data descriptor but foreign keys (whose descriptor only clears a
    cache a new instance lacks), and nothing listens to ``pre_init`` or
    ``post_init``."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return [model.from_db(alias, attnames, row) for row in rows]
    instances = []
    new = model.__new__
    for row in rows:
        instance = new(model)
        instance.__dict__.update(zip(attnames, row, strict=True))
        state = instance._state = ModelState()
        state.adding, state.db = False, alias
        instances.append(instance)
    return instances

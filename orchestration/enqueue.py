"""Writing new runs: their ids, the one INSERT of ``start_workflow(s)`` (what it
does when a key is taken, by the key's scope), and the rows it returns as
``Workflow`` instances (or, for ``ctx.start_children``, only their ids).

The options are validated before this module is reached (``api``); here a
batch of any size is one statement, one round trip and, in autocommit mode,
one transaction.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.models import NOT_PROVIDED, Q, Value
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from .claim.wire import run
from .errors import InvalidWorkflowInput, OrchestrationError
from .listen import NOTIFY_CHANNEL
from .models import KEY_HOLDING_STATUSES, KeyScope, Workflow

#: The columns the insert gives each row its own value of (and ``concurrency_key``
#: when the runs of one insert have different ones): the key goes to
#: ``KEY_COLUMNS[scope]``.
OWN_COLUMNS = ("id", "input_data", "idempotency_key")

#: The arrays the insert takes each row's own value of a column from.
_OWN_ARRAYS = {"id": "unnest(%(ids)s::uuid[])", "input_data": "jsonb_array_elements(%(inputs)s::jsonb)",
               "idempotency_key": "jsonb_array_elements_text(%(keys)s::jsonb)",
               "scoped_key": "jsonb_array_elements_text(%(keys)s::jsonb)",
               "concurrency_key": "jsonb_array_elements_text(%(concurrency_keys)s::jsonb)"}  # fmt: skip

#: The column of a start's key, by the key's scope (``KeyScope``): a key held for
#: ever in ``idempotency_key``, unique where not null as it was in 0.1.0, whose
#: starts name that index as their arbiter (so that the two releases' starts
#: share it during an upgrade); a key with a scope in ``scoped_key``, which
#: holds the same key many times over the months (docs/how-to/upgrading.md).
KEY_COLUMNS: dict[str | None, str] = {
    None: "idempotency_key",
    KeyScope.ACTIVE: "scoped_key",
    KeyScope.DEBOUNCE: "scoped_key",
}

#: ON CONFLICT of a start by the scope of its key (the arbiters are the partial
#: unique indexes of ``Workflow.Meta``): the key's first run ever, its active
#: run, or its run not yet claimed (which takes the start's input, and the
#: concurrency key given or made of it) answers instead of a new run. The last
#: two are race-free: the index decides, not a read. A paused run holds its key
#: too: the indexes' predicates have ``paused`` (migration 0033), and the
#: predicates here, narrower, still name them as arbiters (PostgreSQL infers an
#: index whose predicate follows from the clause's), as they did the indexes
#: before 0033: the same statement serves both sides of the upgrade.
KEY_CONFLICTS: dict[str | None, str] = {
    None: "(idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
    KeyScope.ACTIVE: "(scoped_key) WHERE key_scope = 'active' AND status IN ('pending', 'running') DO NOTHING",
    KeyScope.DEBOUNCE: "(scoped_key) WHERE key_scope = 'debounce' AND status = 'pending' AND started_at IS NULL "
    "DO UPDATE SET input_data = excluded.input_data, concurrency_key = excluded.concurrency_key",
}

#: A key's active run can end between the INSERT that met it and the read of it:
#: the start is then tried again, and makes a run. More rounds are a bug's sign.
_ROUNDS = 5


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
        ids.append(_uuid_of(version | ((bits >> 62) & 0xFFF) << 64 | bits & ((1 << 62) - 1)))
    return ids


def _uuid_of(value: int) -> uuid.UUID:
    """``uuid.UUID(int=value)`` for a ``value`` made in range, set as ``UUID.__init__``
    sets it: sorting out which of five ways a UUID was given costs as much again."""
    made = object.__new__(uuid.UUID)
    object.__setattr__(made, "int", value)
    object.__setattr__(made, "is_safe", uuid.SafeUUID.unknown)
    return made


def insert(
    alias: str,
    options: dict[str, Any],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None = None,
    scope: str | None = None,
) -> list[Workflow]:
    """Insert a run per item of the JSON array ``inputs`` (and of ``keys``, and
    of ``concurrency_keys`` if given) with the column values ``options`` they
    share; return the runs in that order. A key taken (in its ``scope``, see
    ``KEY_CONFLICTS``) returns that key's run instead: ON CONFLICT waited for
    any concurrent insert of it to commit, so a later read sees it."""
    if scope is None and all(key is None for key in keys):  # only a key can be taken: every run is new
        ids = time_ordered_uuids(len(keys))
        return _insert_rows(alias, options, ids, inputs, keys, concurrency_keys, scope, keyless=True)
    column = KEY_COLUMNS[scope]
    return _insert_keyed(alias, options, inputs, keys, concurrency_keys, scope, attrgetter(column))


def insert_ids(
    alias: str,
    options: dict[str, Any],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None = None,
) -> list[uuid.UUID]:
    """``insert``, returning only the runs' ids: the insert reads back each
    row's id and key, not the row, and makes no ``Workflow`` (1.4 KB a run
    kept, 2 KB at the peak: memory a parent of 10,000 children held for nothing)."""
    found = _insert_keyed(alias, options, inputs, keys, concurrency_keys, None, attrgetter("key"), ids_only=True)
    return [run.pk for run in found]


class _Started(NamedTuple):
    """A run as ``insert_ids`` reads it: what the keyed insert checks of it."""

    pk: uuid.UUID
    key: str | None
    workflow_type: str


def _started(
    alias: str, ids: list[uuid.UUID], keys: list[str | None], workflow_type: str, count: int, array: str
) -> list[_Started]:
    """The runs of ``ids`` that an insert of ``ids`` (``array``) made, ``count``
    of them: all of them, the usual case, with no row read back (10,000 rows
    read back were 2.5 MB at the start of a parent of 10,000 children); else
    those found, the others' keys being taken."""
    if count == len(ids):
        return [_Started(pk, key, workflow_type) for pk, key in zip(ids, keys, strict=True)]
    new = {pk for (pk,) in run(alias, "SELECT id FROM workflows WHERE id = ANY(%(ids)s::uuid[])", {"ids": array})}
    return [_Started(pk, key, workflow_type) for pk, key in zip(ids, keys, strict=True) if pk in new]


def _insert_keyed(
    alias: str,
    options: dict[str, Any],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None,
    scope: str | None,
    key_of: Callable[[Any], str | None],
    ids_only: bool = False,
) -> list[Any]:
    """``insert`` of runs of which some have a key (each run a ``Workflow``,
    or a ``_Started`` when ``ids_only``)."""
    # A batch is written whole or not at all: a key held by another type's run refuses it after its INSERT.
    with transaction.atomic(using=alias) if len(keys) > 1 else contextlib.nullcontext():
        for _ in range(_ROUNDS):
            ids = time_ordered_uuids(len(keys))
            rows = _insert_rows(alias, options, ids, inputs, keys, concurrency_keys, scope, ids_only=ids_only)
            created = {workflow.pk: workflow for workflow in rows}
            found = [created.get(pk) for pk in ids]
            if None not in found:  # every run is new (the usual case): none to find by its key
                return found
            by_key: dict[str | None, Any] = {key_of(w): w for w in rows if key_of(w)}
            missing = {key for key, pk in zip(keys, ids, strict=True) if pk not in created and key not in by_key}
            if missing:
                by_key.update((key_of(w), w) for w in _holders(alias, missing, scope, ids_only))
            if not missing - by_key.keys():
                found = [created.get(pk) or by_key[key] for pk, key in zip(ids, keys, strict=True)]
                _refuse_other_types(found, options["workflow_type"], key_of)
                return found
    raise OrchestrationError(f"Could not start a run of key(s) {', '.join(map(str, missing))} in {_ROUNDS} rounds.")


def _refuse_other_types(runs: list[Any], workflow_type: str, key_of: Callable[[Any], str | None]) -> None:
    """A key names one run: a start of another type under it is a mistake that
    returning that run would hide."""
    for workflow in runs:
        if workflow.workflow_type != workflow_type:
            raise InvalidWorkflowInput(
                f"Idempotency key {key_of(workflow)!r} already belongs to workflow {workflow.pk} of type "
                f"{workflow.workflow_type!r}; it cannot start a run of {workflow_type!r}. Use a key of its own, "
                f"for example prefixed with the type."
            )


def _holders(alias: str, keys: set[str | None], scope: str | None, ids_only: bool = False) -> Any:
    """The runs that hold ``keys`` in ``scope`` (``ids_only``: as ``_Started``)."""
    if scope is None:
        holders = Workflow.objects.using(alias).filter(idempotency_key__in=keys)
    else:
        holding = Q(scoped_key__in=keys, key_scope=scope, status__in=KEY_HOLDING_STATUSES)
        holders = Workflow.objects.using(alias).filter(holding)
    if ids_only:
        return [_Started(*row) for row in holders.values_list("pk", KEY_COLUMNS[scope], "workflow_type")]
    return holders


def _insert_rows(
    alias: str,
    options: dict[str, Any],
    ids: list[uuid.UUID],
    inputs: str,
    keys: list[str | None],
    concurrency_keys: list[str | None] | None,
    scope: str | None,
    keyless: bool = False,
    ids_only: bool = False,
) -> list[Any]:
    """The new rows (or the run a debounced start updated): the first comes back
    whole, the others as their id and key (their input is ``inputs``, decoded
    here), since the rows of one INSERT differ in nothing else; ``keyless`` (no
    key given, so every run is new), only the values the database made of the
    first come back (``_made_by_database``), and the runs are ``ids``, in their
    order. (An input's objects come back as ``json`` reads them, equal to what
    jsonb stores; its keys in the order they were sent.) ``ids_only``: each
    new row's id and key only, as a ``_Started``."""
    connection = connections[alias]
    key_column = KEY_COLUMNS[scope]
    own: tuple[str, ...] = (*OWN_COLUMNS[:-1], key_column)
    if concurrency_keys is not None:
        own = (*own, "concurrency_key")
    single = len(ids) == 1
    if single and keyless:  # no key given: no key column (NULL by default)
        own = tuple(column for column in own if column != key_column)
    statement = _statement(alias, tuple(options), own, scope, keyless, single, ids_only)
    params: dict[str, Any] = {**options, "notify_queue": options["queue"]}
    if single:  # the row's own values as they are (its input: the one item of the array ``inputs``)
        params.update(id=ids[0].hex, input_data=inputs[1:-1], idempotency_key=keys[0], scoped_key=keys[0])
        if concurrency_keys is not None:
            params["concurrency_key"] = concurrency_keys[0]
    else:
        # Arrays as text (psycopg's list dumpers cost more); a uuid as its 32 hex digits, which str() costs 3 times.
        params.update(ids="{" + ",".join([workflow_id.hex for workflow_id in ids]) + "}", inputs=inputs,
                      keys=json.dumps(keys))  # fmt: skip
        if concurrency_keys is not None:
            params["concurrency_keys"] = json.dumps(concurrency_keys)
    rows = run(alias, statement, params)  # prepared, as the hot path's statements are
    if ids_only and not single:
        return _started(alias, ids, keys, options["workflow_type"], rows[0][0], params["ids"])
    if not rows:
        return []
    if ids_only:
        return [_Started(workflow_id, key, options["workflow_type"]) for workflow_id, key, *_ in rows]
    attnames = _attnames()
    if keyless:  # the rows sent, in their order: reading each back would cost more than the insert's own work
        # Only the values the database made come back; the others are the defaults and options it was given.
        shared = {**_column_defaults(), **_read(connection, options.items()), **_read(connection, _zip_made(rows[0]))}
        new = [(workflow_id, None) for workflow_id in ids]
    else:
        shared = _read(connection, zip(attnames, next(row[2:] for row in rows if row[2] is not None), strict=True))
        new = [(workflow_id, key) for workflow_id, key, *_ in rows]
    input_of = dict(zip(ids, json.loads(inputs), strict=True))
    concurrency_key_of = dict(zip(ids, concurrency_keys, strict=True)) if concurrency_keys is not None else None
    workflows = []
    for workflow_id, key in new:
        values = shared.copy()
        # A run a debounced start updated is the only row, whole: its input is the template's.
        values["id"], values[key_column] = workflow_id, key
        values["input_data"] = input_of.get(workflow_id, values["input_data"])
        if concurrency_key_of is not None:
            values["concurrency_key"] = concurrency_key_of[workflow_id]
        workflows.append(values)
    return _as_instances(Workflow, alias, attnames, workflows)


@functools.lru_cache(maxsize=32)
def _statement(
    alias: str,
    shared: tuple[str, ...],
    own: tuple[str, ...] = OWN_COLUMNS,
    scope: str | None = None,
    keyless: bool = False,
    single: bool = False,
    ids_only: bool = False,
) -> str:
    """The insert for the columns ``shared`` by its rows, made once per database
    and set of columns: making it is a fair part of a single start's cost.

    It inserts a row per item of the arrays ``%(ids)s``, ``%(inputs)s`` and
    ``%(keys)s`` (and ``%(concurrency_keys)s`` when ``own`` has it), with the
    values ``shared`` by every row (a bound NULL's type spelled out), but for
    keys taken (``KEY_CONFLICTS``), and NOTIFYs ``%(notify_queue)s`` once. It
    returns each row's id and key, and the first row whole beside each: the
    rows of one INSERT differ in nothing else. ``keyless`` (no key given, so
    every row is new): it returns only the columns ``_made_by_database`` of one
    row, whatever the count. ``single``: one row of
    the values ``%(column)s`` of ``own``, inserted with VALUES, which PostgreSQL
    parses and plans in two thirds of the time of the arrays' form (what every
    start costs where statements are not prepared). ``ids_only``: how many
    rows are new (of one row, its id and key), and no row whole."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    typed = [(column, Workflow._meta.get_field(column).db_type(connection) or "") for column in shared]
    columns = _made_by_database() if keyless else [str(field.column) for field in Workflow._meta.concrete_fields]
    if ids_only:
        columns = ["id", KEY_COLUMNS[scope]]
    returning = ", ".join(quote(column) for column in columns)
    names = ", ".join(column for column, _ in typed)
    values = ", ".join(f"%({column})s::{db_type}" for column, db_type in typed)
    wake = f"SELECT pg_notify('{NOTIFY_CHANNEL}', %(notify_queue)s) WHERE EXISTS (SELECT FROM new)"
    if single:
        own_values = ", ".join(
            f"%({column})s::{Workflow._meta.get_field(column).db_type(connection)}" for column in own
        )
        return f"""
            WITH new AS (
                INSERT INTO workflows ({", ".join(own)}, {names}) VALUES ({own_values}, {values})
                {"" if keyless else f"ON CONFLICT {KEY_CONFLICTS[scope]}"}
                RETURNING {returning}
            ), wake AS ({wake})
            SELECT {"" if keyless else f"new.id, new.{KEY_COLUMNS[scope]}, "}new.* FROM new LEFT JOIN wake ON true
        """
    return f"""
        WITH new AS (
            INSERT INTO workflows ({", ".join(own)}, {names})
            SELECT {", ".join(f"r.{column}" for column in own)}, {values}
            FROM ROWS FROM ({", ".join(_OWN_ARRAYS[column] for column in own)}) AS r ({", ".join(own)})
            ON CONFLICT {KEY_CONFLICTS[scope]}
            RETURNING {returning}
        ), whole AS (
            SELECT * FROM new LIMIT 1
        ), wake AS ({wake})
        {_KEYLESS_ROWS if keyless else (_IDS if ids_only else _ROWS).format(key=KEY_COLUMNS[scope])}
    """


#: What the insert of many rows returns (the insert of one, the same of its row):
#: each new row's id and key, the first row whole beside each ...
_ROWS = "SELECT new.id, new.{key}, whole.* FROM new LEFT JOIN whole ON whole.id = new.id LEFT JOIN wake ON true"
#: ... or how many rows are new only (``insert_ids``: it knows their ids and keys) ...
_IDS = "SELECT count(*) FROM new LEFT JOIN wake ON true"
#: ... or, when no key was given, the first row only (its columns ``_made_by_database``).
_KEYLESS_ROWS = "SELECT whole.* FROM whole LEFT JOIN wake ON true"


@functools.cache
def _attnames() -> tuple[str, ...]:
    return tuple(field.attname for field in Workflow._meta.concrete_fields)


@functools.cache
def _made_by_database() -> tuple[str, ...]:
    """The columns whose value the database makes for a new row (its creation
    time) rather than a constant default (``db_default=Value``) or NULL: what
    the insert of runs without a key returns."""
    return tuple(
        str(field.column)
        for field in Workflow._meta.concrete_fields
        if field.db_default is not NOT_PROVIDED and not isinstance(field.db_default, Value) and not field.primary_key
    )


def _zip_made(row: tuple[Any, ...]) -> Any:
    return zip(_made_by_database(), row, strict=True)


@functools.cache
def _column_defaults() -> dict[str, Any]:
    """Each column's value in a new row given no value, when it is a constant
    (``db_default=Value``; else None): ``Workflow`` declares every database
    default (DESIGN: they are real), and a test compares a start's run with its row."""
    return {
        field.attname: field.db_default.value if isinstance(field.db_default, Value) else None
        for field in Workflow._meta.concrete_fields
    }


def _read(connection: Any, values: Any) -> dict[str, Any]:
    """``values`` (pairs of a column and its value as bound or returned) as the
    model's fields read them (``from_db_value``: the JSON columns, whose converters
    are found once per connection, as asking each field for them cost a single start as much as its JSON)."""
    converters = connection.__dict__.get("_orchestration_converters")
    if converters is None:
        fields = Workflow._meta.concrete_fields
        found = {field.attname: tuple(field.get_db_converters(connection)) for field in fields}
        converters = connection._orchestration_converters = {name: found for name, found in found.items() if found}
    read = dict(values)
    for name in converters.keys() & read.keys():
        for converter in converters[name]:
            read[name] = converter(read[name], None, connection)
    return read


def _as_instances(model: Any, alias: str, attnames: Sequence[str], rows: list[dict[str, Any]]) -> list[Any]:
    """``model.from_db`` for each row (a value for each of ``attnames``), without
    its ``__init__`` where nothing can tell the difference: every column is
    given, the model has no field with a data descriptor but foreign keys (whose
    descriptor only clears a cache a new instance lacks), and nothing listens to
    ``pre_init`` or ``post_init``. Each row becomes its instance's ``__dict__``."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return [model.from_db(alias, attnames, [row[name] for name in attnames]) for row in rows]
    instances = []
    new = model.__new__
    for row in rows:
        instance = new(model)
        instance.__dict__ = row
        state = row["_state"] = ModelState()
        state.adding, state.db = False, alias
        instances.append(instance)
    return instances

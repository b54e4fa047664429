"""The few statements the ORM cannot express, named and kept in one place."""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import connections
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

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
    alias: str, options: dict[str, Any], ids: list[uuid.UUID], inputs: str, keys: list[str | None]
) -> list[Workflow]:
    """``start_workflows`` in one statement: insert a row per ``ids[n]``,
    item n of the JSON array ``inputs``, ``keys[n]`` and the shared column ``options``;
    skip keys already used; NOTIFY the queue once; return the new rows.

    Only the first row comes back whole: the rows of one INSERT differ in
    nothing but the three columns given for each (every other column is an
    option they share or a database default, ``now()`` included), so the
    others come back as their id and key, and their input is ``inputs``
    decoded at once. Reading every column of every row was half of a bulk
    start's time in Python, spent after its commit, while the workers it woke
    competed for the CPU. (An input's objects come back as ``json`` reads
    them, equal to what jsonb stores; its keys in the order they were sent.)"""
    from .models import Workflow

    connection = connections[alias]
    fields = Workflow._meta.concrete_fields
    statement = _insert_statement(alias, tuple(options))
    # Arrays as text: psycopg's list dumpers were a tenth of a bulk start.
    id_array = "{" + ",".join(map(str, ids)) + "}"
    params = [*options.values(), id_array, inputs, json.dumps(keys), NOTIFY_CHANNEL, options["queue"]]
    rows = run(alias, statement, params)  # prepared: planning was a fifth of a single start
    if not rows:
        return []
    attnames = [field.attname for field in fields]
    template = _converted(connection, fields, list(next(row[2:] for row in rows if row[2] is not None)))
    id_at, input_at, key_at = (attnames.index(column) for column in _OWN_COLUMNS)
    input_of = dict(zip(ids, json.loads(inputs), strict=True))
    workflows = []
    for workflow_id, key, *_ in rows:
        values = template.copy()
        values[id_at], values[input_at], values[key_at] = workflow_id, input_of[workflow_id], key
        workflows.append(values)
    return _as_instances(Workflow, alias, attnames, workflows)


#: The columns ``insert_workflows`` gives each row its own value of.
_OWN_COLUMNS = ("id", "input_data", "idempotency_key")


@functools.lru_cache(maxsize=32)
def _insert_statement(alias: str, shared: tuple[str, ...]) -> str:
    """``insert_workflows``'s SQL for the columns ``shared`` by its rows, made
    once: building it on every call was about a tenth of a single start's
    Python CPU (measured, alternated: 456-626 against 561-712 µs a start)."""
    from .models import Workflow

    connection = connections[alias]
    quote = connection.ops.quote_name
    returning = ", ".join(quote(field.column) for field in Workflow._meta.concrete_fields if field.column)

    def typed_parameter(name: str) -> str:  # a bound NULL's type must be spelled out
        return f"%s::{Workflow._meta.get_field(name).db_type(connection)}"

    return f"""
        WITH new AS (
            INSERT INTO workflows ({", ".join(_OWN_COLUMNS)}, {", ".join(map(quote, shared))})
            SELECT r.id, r.input_data, r.idempotency_key, {", ".join(map(typed_parameter, shared))}
            FROM ROWS FROM (unnest(%s::uuid[]), jsonb_array_elements(%s::jsonb), jsonb_array_elements_text(%s::jsonb))
                AS r (id, input_data, idempotency_key)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING {returning}
        ), whole AS (
            SELECT * FROM new LIMIT 1
        ), wake AS (
            SELECT pg_notify(%s, %s) WHERE EXISTS (SELECT FROM new)
        )
        SELECT new.id, new.idempotency_key, whole.*
        FROM new LEFT JOIN whole ON whole.id = new.id LEFT JOIN wake ON true
    """


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
    ``post_init``. That ``__init__`` was a quarter of a bulk start."""
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


# -- the worker's hot path ----------------------------------------------------
#
# One statement each, so that in autocommit mode each is one round trip and one
# transaction. Every one but the claim starts with CTE ``held``: the workflow
# row if, and only if, this lease still holds it, locked for the rest of the
# statement (a concurrent cancel or reclaim either commits first, and ``held``
# is empty, or waits for this statement). Writes that change no indexed column
# (``current_step``, the step rows) can be HOT updates.

#: ``{locked}`` is the ORM's ``select_for_update(skip_locked=True)`` of the due
#: rows (columns ``id``, ``started_at``), ``{returning}`` the columns to return.
#: The last column says the run is fresh: never claimed and no step recorded.
#: ``claimed.started_at`` is the locked row's, so a row claimed by another
#: worker since this statement's snapshot is never fresh; steps that snapshot
#: does not see could only come from such a claim (or from a writer racing
#: with this claim, which may as well have come after it).
#:
#: A fresh run's step 1 is recorded running here, in the claim's transaction,
#: before any of its code runs: its name is written with its checkpoint (or
#: its failure), and the row is deleted if the run ends without calling a step
#: (``ClaimedRun.placeholder``). One statement a workflow fewer.
_CLAIMS = """claimed AS MATERIALIZED ({locked}), taken AS (
    UPDATE workflows AS w
    SET status = 'running', lease_token = gen_random_uuid(), attempts = w.attempts + 1, worker_id = %s,
        started_at = COALESCE(w.started_at, statement_timestamp()), updated_at = statement_timestamp(),
        run_after = NULL, waiting_for = NULL
    FROM claimed
    WHERE w.id = claimed.id
    RETURNING {returning},
        claimed.started_at IS NULL AND NOT EXISTS (SELECT FROM workflow_steps AS s WHERE s.workflow_id = w.id) AS fresh
), placeholder AS (
    INSERT INTO workflow_steps (workflow_id, step_number, status, started_at, attempts)
    SELECT id, 1, 'running', statement_timestamp(), 1 FROM taken WHERE fresh
    ON CONFLICT (workflow_id, step_number) DO NOTHING
)"""
CLAIM = f"WITH {_CLAIMS}\nSELECT * FROM taken"

#: The fence. ``IS NOT DISTINCT FROM``, the same as ``=`` on this NOT NULL
#: column, keeps the planner off ``idx_workflows_running`` (whose predicate it
#: cannot prove from it): with stale statistics that index, estimated to hold
#: one row, was picked over the primary key and walked past every finished
#: run's dead entry (auto_explain).
_RUNNING = "status IS NOT DISTINCT FROM 'running'"
_HELD = f"id = %(id)s AND lease_token = %(lease)s AND {_RUNNING}"

#: A step's checkpoint written late, with the run's next write (see
#: ``queue.complete_step_deferred``); ``completed_at`` is when the body returned.
_CHECKPOINT = """, checkpoint AS (
    UPDATE workflow_steps
    SET status = 'completed', output_data = %(checkpoint_output)s::jsonb, error_message = NULL,
        step_name = %(checkpoint_name)s,
        completed_at = statement_timestamp() - make_interval(secs => %(checkpoint_age)s)
    -- the step by its key, not joined with held: with stale statistics a join
    -- was planned as a sequential scan of workflow_steps (auto_explain)
    WHERE workflow_id = %(id)s AND step_number = %(checkpoint_step)s AND EXISTS (SELECT FROM held)
)"""


def held(changes: str | None, checkpoint: bool) -> str:
    """The head of a fenced statement: CTE ``held`` locks (and, with ``changes``,
    updates) the workflow row; with ``checkpoint``, a deferred checkpoint is
    written too and ``current_step`` moves to it."""
    sets = [changes] if changes else []
    if checkpoint:
        # Progress ends a crash loop: deaths are counted at one step in a row.
        sets.append("current_step = %(checkpoint_step)s, worker_deaths = 0, lost_at_step = NULL")
    if sets:
        row = f"UPDATE workflows SET {', '.join(sets)} WHERE {_HELD} RETURNING id"
    else:
        row = f"SELECT id FROM workflows WHERE {_HELD} FOR NO KEY UPDATE"
    return f"WITH held AS ({row}){_CHECKPOINT if checkpoint else ''}\n"


#: Record step ``%(step)s`` running; empty result: the lease is lost.
START_STEP = """
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at, attempts)
SELECT id, %(step)s, %(name)s, 'running', statement_timestamp(), 1 FROM held
ON CONFLICT (workflow_id, step_number) DO UPDATE
SET step_name = excluded.step_name, status = 'running', started_at = excluded.started_at,
    completed_at = NULL, error_message = NULL,
    -- the claim's unnamed row (sql.CLAIM) is this attempt's own start
    attempts = workflow_steps.attempts
        + (workflow_steps.step_name IS NOT NULL OR workflow_steps.status <> 'running')::int
RETURNING 1
"""

#: The change of a completed workflow (see ``queue.complete_workflow``).
COMPLETED = (
    "status = 'completed', output_data = %(output)s::jsonb, finished_at = statement_timestamp(), "
    "updated_at = statement_timestamp(), lease_token = NULL, error_message = NULL, error_traceback = NULL"
)

#: After ``held(...)``: 1 if the lease held (and the writes were made), else 0.
COUNT_HELD = "SELECT count(*) FROM held"

#: Complete several runs, each fenced by its own lease, with each one's
#: deferred checkpoint (a NULL step: none): ``queue.finish_and_claim`` writes
#: what the process's threads finished since its last claim with that claim.
#: Returns the ids completed; a run missing from them had lost its lease.
_COMPLETIONS = f"""done AS (
    UPDATE workflows AS w
    SET status = 'completed', output_data = d.output, finished_at = statement_timestamp(),
        updated_at = statement_timestamp(), lease_token = NULL, error_message = NULL, error_traceback = NULL,
        current_step = COALESCE(d.step, w.current_step),
        worker_deaths = CASE WHEN d.step IS NULL THEN w.worker_deaths ELSE 0 END,
        lost_at_step = CASE WHEN d.step IS NULL THEN w.lost_at_step END
    FROM ROWS FROM (unnest(%s::uuid[]), unnest(%s::uuid[]), jsonb_array_elements(%s::jsonb),
                    unnest(%s::integer[]), jsonb_array_elements_text(%s::jsonb),
                    jsonb_array_elements(%s::jsonb), unnest(%s::float8[]))
         AS d (id, lease, output, step, step_name, step_output, age)
    WHERE w.id = ANY(%s::uuid[]) AND w.id = d.id AND w.lease_token = d.lease AND w.{_RUNNING}
    RETURNING w.id, d.step, d.step_name, d.step_output, d.age
), checkpoint AS (
    UPDATE workflow_steps
    SET status = 'completed', output_data = done.step_output, error_message = NULL, step_name = done.step_name,
        completed_at = statement_timestamp() - make_interval(secs => done.age)
    FROM done
    WHERE workflow_steps.workflow_id = done.id AND workflow_steps.step_number = done.step
)"""
COMPLETE_MANY = f"WITH {_COMPLETIONS}\nSELECT id FROM done"

#: ``COMPLETE_MANY`` and ``CLAIM`` in one statement (their parameters in that
#: order): the claimed rows, each with the array of the ids completed, or one
#: row of NULLs with it when nothing was claimed.
COMPLETE_AND_CLAIM = f"""WITH {_COMPLETIONS}, {_CLAIMS}
SELECT taken.*, completed.ids FROM (SELECT array_agg(id) AS ids FROM done) AS completed LEFT JOIN taken ON true"""

#: Run first in the transaction of ``queue.finish_and_claim``. Its statements
#: are index lookups of a few rows, but with stale statistics (a table
#: analysed while nearly empty, then filled faster than autovacuum re-analyses
#: it) the planner expects a handful of rows in the whole table, and picks
#: plans that read all of them: the claim read every queued row with a bitmap
#: scan and sorted them (4.6 ms a claim with 4,500 queued), the completion
#: hash-joined a sequential scan of ``workflow_steps`` (2.7 ms with 7,400
#: steps), measured with auto_explain. With those plan shapes priced out, what
#: is left is the ordered scan of ``idx_workflows_claim``, which stops after
#: ``LIMIT`` rows, and nested loops over primary-key and step lookups, whatever
#: the statistics say. ``true``: for this transaction only (so also behind
#: PgBouncer in transaction mode); nothing else runs in it.
INDEX_PLANS_ONLY = (
    "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true), "
    "set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)"
)


def run_together(alias: str, statements: list[tuple[str, Any]]) -> list[list[tuple[Any, ...]]]:
    """Run ``statements`` after ``INDEX_PLANS_ONLY``, in one transaction and
    one round trip (psycopg's pipeline mode), and return the rows of each.

    The connection is in autocommit mode, and psycopg sends one Sync, at the
    end of the pipeline: until then the server runs the statements in one
    implicit transaction, committed at the Sync, rolled back whole if one
    fails (PostgreSQL's extended query protocol). No BEGIN, no COMMIT.

    Statements are prepared (see ``run``), and a prepared statement's generic
    plan, made once and kept for the connection's life, is planned under
    ``INDEX_PLANS_ONLY`` too: without it, a plan made while a table was nearly
    empty (a sequential scan of ``workflow_steps``) was kept as it grew.

    Inside a transaction the caller opened (``atomic()``) they run one by one
    in it, without ``INDEX_PLANS_ONLY``, whose settings would outlive them there.
    """
    connection = connections[alias]
    if connection.in_atomic_block:
        return [run(alias, statement, params) for statement, params in statements]
    connection.ensure_connection()
    pg = connection.connection
    cursors = []
    with connection.wrap_database_errors:
        try:
            with pg.pipeline():
                psycopg.Cursor(pg).execute(INDEX_PLANS_ONLY)
                for statement, params in statements:
                    cursors.append(psycopg.Cursor(pg))  # server-side binding: prepared (see ``run``)
                    cursors[-1].execute(statement, params)
        except BaseException:
            if not pg.closed and pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    pg.rollback()
            raise
        return [cursor.fetchall() for cursor in cursors]  # each of them returns rows


def run(alias: str, statement: str, params: Any) -> list[tuple[Any, ...]]:
    """Execute one of the statements above and return its rows.

    With server-side binding, so that psycopg prepares them once the
    connection's ``prepare_threshold`` allows (Django's ``OPTIONS``; Django's
    default, None, prepares nothing, as PgBouncer in transaction mode needs):
    parsing and planning were a third of the database's work per statement.
    """
    connection = connections[alias]
    connection.ensure_connection()
    raw: Any = psycopg.Cursor(connection.connection)  # django-stubs expects a wrapper here
    # Django's wrapper still applies: its error classes, execute_wrapper()s, DEBUG's query log.
    cursor = connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)
    with cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()

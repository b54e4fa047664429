"""The previous release (0.1.0) keeps working on this release's schema, while
both run during an upgrade (docs/how-to/upgrading.md)."""

from __future__ import annotations

import json
import uuid

import pytest
from django.db import connection

from orchestration import start_workflow
from orchestration.models import Workflow

pytestmark = pytest.mark.django_db

#: 0.1.0's start (``sql._insert_statement`` at aedc35c), with the columns it
#: gives each row and its ON CONFLICT clause as they were.
PREVIOUS_RELEASE_START = """
    INSERT INTO workflows (id, input_data, idempotency_key, workflow_type)
    SELECT r.id, r.input_data, r.idempotency_key, 'echo'
    FROM ROWS FROM (unnest(%s::uuid[]), jsonb_array_elements(%s::jsonb), jsonb_array_elements_text(%s::jsonb))
        AS r (id, input_data, idempotency_key)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
"""

#: ``pg_get_indexdef`` of 0.1.0's unique index of the keys held for ever.
PREVIOUS_RELEASE_KEY_INDEX = (
    "CREATE UNIQUE INDEX uniq_workflows_idempotency_key ON public.workflows "
    "USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)"
)


#: The columns of 0.1.0's tables (migration 0005) and their types: what its
#: statements read and write.
_TIME = "timestamp with time zone"
PREVIOUS_RELEASE_COLUMNS = {
    "workflows": {
        "id": "uuid", "workflow_type": "character varying(100)", "status": "character varying(20)",
        "input_data": "jsonb", "current_step": "integer", "max_retries": "integer", "error_message": "text",
        "created_at": _TIME, "updated_at": _TIME, "attempts": "integer", "output_data": "jsonb", "run_after": _TIME,
        "queue": "character varying(100)", "priority": "integer", "idempotency_key": "character varying(255)",
        "lease_token": "uuid", "worker_id": "character varying(255)", "started_at": _TIME, "finished_at": _TIME,
        "error_traceback": "text", "worker_deaths": "integer", "lost_at_step": "integer", "deadline": _TIME,
        "parent_id": "uuid", "waiting_for": "character varying(200)",
    },
    "workflow_steps": {
        "id": "bigint", "step_number": "integer", "step_name": "character varying(200)",
        "status": "character varying(20)", "output_data": "jsonb", "started_at": _TIME, "completed_at": _TIME,
        "error_message": "text", "attempts": "integer", "workflow_id": "uuid",
    },
    "workflow_events": {
        "id": "bigint", "name": "character varying(200)", "payload": "jsonb", "created_at": _TIME,
        "consumed_by_step": "integer", "workflow_id": "uuid",
    },
}  # fmt: skip


def table_columns(table: str) -> dict[str, tuple[str, bool]]:
    """Each column of ``table``: its type, and whether a row must give it (NOT NULL, no default)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull AND NOT atthasdef AND attidentity = '' "
            "FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            [table],
        )
        return {name: (kind, required) for name, kind, required in cursor.fetchall()}


def previous_release_start(key: str | None) -> list[uuid.UUID]:
    """The ids 0.1.0's start inserts for one run of ``key``: none if the key is taken."""
    with connection.cursor() as cursor:
        ids = "{" + str(uuid.uuid4()) + "}"
        cursor.execute(PREVIOUS_RELEASE_START, [ids, json.dumps([{"n": 1}]), json.dumps([key])])
        return [row[0] for row in cursor.fetchall()]


def test_previous_release_start__finds_its_arbiter_without_a_key():
    assert len(previous_release_start(None)) == 1


def test_previous_release_start__finds_its_arbiter_with_a_key_taken_or_not():
    assert len(previous_release_start("order-7")) == 1
    assert previous_release_start("order-7") == []


def test_key_held_for_ever__has_the_previous_releases_unique_index():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef('uniq_workflows_idempotency_key'::regclass)")
        assert cursor.fetchone()[0] == PREVIOUS_RELEASE_KEY_INDEX


def test_key_held_for_ever__is_one_key_for_both_releases():
    [first] = previous_release_start("order-7")
    assert start_workflow("echo", {"n": 2}, idempotency_key="order-7").pk == first
    assert previous_release_start("order-7") == []


def test_key_with_a_scope__never_meets_the_previous_releases_key():
    scoped = start_workflow("echo", {"n": 1}, idempotency_key="order-7", unique_while_active=True)
    kept = previous_release_start("order-7")
    assert len(kept) == 1 and Workflow.objects.get(pk=kept[0]).idempotency_key == "order-7"
    assert (scoped.idempotency_key, scoped.scoped_key, scoped.key_scope) == (None, "order-7", "active")


def test_previous_release_delete__of_a_run_with_forks_leaves_them_unlinked():
    """0.1.0's retention purge deletes a run with the SQL its models make, which
    knows nothing of forks: the database sets their link NULL."""
    origin = start_workflow("echo", {"n": 1})
    fork = start_workflow("echo", {"n": 2})
    Workflow.objects.filter(pk=fork.pk).update(forked_from=origin.pk)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM workflows WHERE id = %s", [origin.pk])
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the check a commit makes
    assert Workflow.objects.get(pk=fork.pk).forked_from_id is None


@pytest.mark.parametrize("table", PREVIOUS_RELEASE_COLUMNS)
def test_previous_release_columns__are_all_there_with_their_types(table):
    columns = table_columns(table)
    known = PREVIOUS_RELEASE_COLUMNS[table]
    assert {name: columns.get(name, ("missing", False))[0] for name in known} == known


@pytest.mark.parametrize("table", PREVIOUS_RELEASE_COLUMNS)
def test_previous_release_inserts__leave_out_no_column_a_row_must_have(table):
    """A column added since 0.1.0 is nullable or has a default: 0.1.0's inserts
    do not name it."""
    columns = table_columns(table)
    added = sorted(columns.keys() - PREVIOUS_RELEASE_COLUMNS[table].keys())
    assert [name for name in added if columns[name][1]] == []

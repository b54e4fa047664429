"""The seed's own SQL, verbatim, against the migrated schema."""

import json

import pytest
from django.core.management import call_command
from django.db import connection

from orchestration.reports import stats
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db

SEED_DEQUEUE = """
            SELECT id, workflow_type, input_data, current_step
            FROM workflows
            WHERE status = 'pending'
            ORDER BY created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        """
SEED_MARK_RUNNING = "UPDATE workflows SET status = 'running', updated_at = now() WHERE id = %s"
SEED_STEP_LOOKUP = """SELECT status, output_data FROM workflow_steps
               WHERE workflow_id = %s AND step_number = %s"""
SEED_STEP_INSERT = """INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at)
               VALUES (%s, %s, %s, 'running', now())
               ON CONFLICT (workflow_id, step_number) DO NOTHING"""
SEED_STEP_COMPLETE = """UPDATE workflow_steps
                   SET status = 'completed', output_data = %s, completed_at = now()
                   WHERE workflow_id = %s AND step_number = %s"""
SEED_CURRENT_STEP = "UPDATE workflows SET current_step = %s, updated_at = now() WHERE id = %s"

SEED_SUCCESS_RATE = """
SELECT
    workflow_type,
    COUNT(*) AS total,
    COUNT(*) FILTER (WHERE status = 'completed') AS completed,
    ROUND(100.0 * COUNT(*) FILTER (WHERE status = 'completed') / COUNT(*), 1) AS success_pct
FROM workflows
WHERE created_at > now() - INTERVAL '24 hours'
GROUP BY workflow_type;
"""
SEED_STUCK = """
SELECT id, workflow_type, current_step, updated_at
FROM workflows
WHERE status = 'running'
  AND updated_at < now() - INTERVAL '5 minutes';
"""
SEED_STEP_DURATIONS = """
SELECT
    w.workflow_type,
    ws.step_name,
    ROUND(AVG(EXTRACT(EPOCH FROM (ws.completed_at - ws.started_at)))::numeric, 2) AS avg_seconds
FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.status = 'completed'
GROUP BY w.workflow_type, ws.step_name
ORDER BY avg_seconds DESC;
"""


def fetch(sql, params=None):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else cursor.rowcount


def test_seed_dequeue_and_execute_step_sql_run_verbatim():
    workflow = WorkflowFactory(input_data={"a": 1})
    [(workflow_id, workflow_type, input_data, current_step)] = fetch(SEED_DEQUEUE)
    assert (workflow_id, workflow_type, json.loads(input_data), current_step) == (
        workflow.pk,
        "three_steps",
        {"a": 1},
        0,
    )
    fetch(SEED_MARK_RUNNING, [workflow_id])
    assert fetch(SEED_STEP_LOOKUP, [workflow_id, 1]) == []
    fetch(SEED_STEP_INSERT, [workflow_id, 1, "first"])
    fetch(SEED_STEP_INSERT, [workflow_id, 1, "first"])  # ON CONFLICT DO NOTHING
    fetch(SEED_STEP_COMPLETE, ['{"ok": true}', workflow_id, 1])
    fetch(SEED_CURRENT_STEP, [1, workflow_id])
    [(status, output)] = fetch(SEED_STEP_LOOKUP, [workflow_id, 1])
    assert (status, json.loads(output)) == ("completed", {"ok": True})
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("running", 1)


def test_seed_monitoring_queries_run_verbatim_and_match_the_stats_module():
    done = WorkflowFactory(status="completed", workflow_type="three_steps")
    WorkflowFactory(status="failed", workflow_type="three_steps")
    WorkflowStepFactory(workflow=done, step_number=1, step_name="first")
    stuck = WorkflowFactory(status="running")
    type(stuck).objects.filter(pk=stuck.pk).update(updated_at="2000-01-01T00:00:00Z")

    assert fetch(SEED_SUCCESS_RATE) == stats.success_rate().rows
    assert [row[:2] for row in fetch(SEED_SUCCESS_RATE)] == [("three_steps", 3)]
    assert [row[0] for row in fetch(SEED_STUCK)] == [stuck.pk] == [row[0] for row in stats.stuck_workflows().rows]
    assert fetch(SEED_STEP_DURATIONS) == stats.step_durations().rows
    assert stats.STUCK_SQL.strip() == SEED_STUCK.strip()
    assert stats.SUCCESS_RATE_SQL.strip() == SEED_SUCCESS_RATE.strip()
    assert stats.STEP_DURATIONS_SQL.strip() == SEED_STEP_DURATIONS.strip()


def test_seed_indexes_exist():
    names = set(fetch("SELECT indexname FROM pg_indexes WHERE tablename IN ('workflows', 'workflow_steps')"))
    assert {("idx_workflows_status",), ("idx_workflow_steps_lookup",), ("idx_workflows_claim",)} <= names


def test_step_lookup_index__is_the_unique_constraints_and_the_only_one_of_its_columns():
    indexes = fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'workflow_steps' "
        "AND indexdef LIKE '%(workflow_id, step_number)'"
    )
    assert [name for name, _ in indexes] == ["idx_workflow_steps_lookup"]
    assert "CREATE UNIQUE INDEX" in indexes[0][1]
    assert fetch("SELECT conname FROM pg_constraint WHERE conrelid = 'workflow_steps'::regclass AND contype = 'u'") == [
        ("idx_workflow_steps_lookup",)
    ]


def test_models__have_every_migration_they_need():
    call_command("makemigrations", "orchestration", check=True, dry_run=True, verbosity=0)


def test_claim_index_is_partial_on_pending_rows():
    [(definition,)] = fetch("SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_workflows_claim'")
    assert "WHERE ((status)::text = 'pending'::text)" in definition


def test_seed_dequeue__never_takes_a_paused_run():
    WorkflowFactory(status="paused")
    with connection.cursor() as cursor:
        cursor.execute(SEED_DEQUEUE)
        assert cursor.fetchone() is None

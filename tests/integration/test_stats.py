"""The overview's figures in ``orchestration.reports.stats``, and ``manage.py workflow_stats``."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.utils import timezone

from orchestration.models import Workflow
from orchestration.reports import stats
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db


def finished(status: str, hours_ago: float, **fields) -> Workflow:
    workflow = WorkflowFactory(status=status, **fields)
    Workflow.objects.filter(pk=workflow.pk).update(finished_at=timezone.now() - datetime.timedelta(hours=hours_ago))
    return workflow


def test_hourly_outcomes__one_bucket_per_hour_quiet_hours_zero_oldest_first():
    finished("completed", 0)
    finished("completed", 0)
    finished("failed", 0)
    finished("completed", 5)
    finished("completed", 30)  # outside the window
    finished("cancelled", 0)  # neither completed nor failed
    buckets = stats.hourly_outcomes(24)
    assert len(buckets) == 24
    assert [b.hour for b in buckets] == sorted(b.hour for b in buckets)
    assert buckets[-1].hour == timezone.now().replace(minute=0, second=0, microsecond=0)
    assert (buckets[-1].completed, buckets[-1].failed) == (2, 1)
    assert (buckets[-6].completed, buckets[-6].failed) == (1, 0)
    assert sum(b.completed for b in buckets) == 3 and sum(b.failed for b in buckets) == 1


def test_hourly_outcomes__counts_a_row_finished_by_plain_sql_at_its_last_update():
    workflow = WorkflowFactory(status="completed")
    Workflow.objects.filter(pk=workflow.pk).update(finished_at=None)
    assert stats.hourly_outcomes(3)[-1].completed == 1


def test_queue_depth__counts_due_scheduled_and_running_per_queue():
    WorkflowFactory(status="pending", queue="default")
    WorkflowFactory(status="pending", queue="default", run_after=timezone.now() + datetime.timedelta(hours=1))
    WorkflowFactory(status="running", queue="default")
    WorkflowFactory(status="pending", queue="emails")
    WorkflowFactory(status="completed", queue="reports")
    rows = {row["queue"]: row for row in stats.queue_depth().as_dicts()}
    assert set(rows) == {"default", "emails"}
    assert (rows["default"]["due"], rows["default"]["scheduled"], rows["default"]["running"]) == (1, 1, 1)
    assert rows["emails"]["due"] == 1 and rows["emails"]["oldest_due"] is not None


def test_table_health__reports_tuples_and_vacuums_of_both_tables():
    WorkflowStepFactory()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
    rows = {row["table_name"]: row for row in stats.table_health().as_dicts()}
    assert set(rows) == {"workflows", "workflow_steps"}
    assert set(rows["workflows"]) >= {"live_tuples", "dead_tuples", "dead_pct", "last_autovacuum", "total_bytes"}
    assert rows["workflows"]["total_bytes"] > 0


def test_oldest_pending__is_the_first_created_pending_workflow_with_its_age():
    assert stats.oldest_pending() is None
    old = WorkflowFactory(status="pending")
    Workflow.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(hours=2))
    WorkflowFactory(status="pending")
    WorkflowFactory(status="failed")
    oldest = stats.oldest_pending()
    # now() is the start of the test's transaction, a little before the update.
    assert oldest["id"] == old.pk and oldest["age"] > datetime.timedelta(minutes=119)


def test_workflow_types__lists_each_type_once_in_order():
    for name in ("b", "a", "b", "c", "a"):
        WorkflowFactory(workflow_type=name)
    assert stats.workflow_types() == ["a", "b", "c"]


def test_time_limit__cancels_a_statement_that_runs_too_long():
    with pytest.raises(OperationalError, match="statement timeout"), stats.time_limit(0.05):  # noqa: SIM117
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")


# -- manage.py workflow_stats ---------------------------------------------------------


def run_stats(*args: str) -> str:
    out = io.StringIO()
    call_command("workflow_stats", *args, stdout=out)
    return out.getvalue()


def test_workflow_stats__prints_the_three_reports_as_aligned_tables():
    WorkflowFactory(status="completed", workflow_type="three_steps")
    WorkflowFactory(status="failed", workflow_type="three_steps")
    text = run_stats()
    assert "Success rate per workflow type, last 24 hours" in text
    assert "Running workflows with no heartbeat for 5 minutes (dead workers)" in text
    assert "Average duration of completed steps" in text
    header, rule, row = text.splitlines()[1:4]
    assert header.split() == ["workflow_type", "total", "completed", "success_pct"]
    assert row.split() == ["three_steps", "2", "1", "50.0"]
    assert len(header) == len(rule)


def test_workflow_stats__json_matches_the_stats_module_the_overview_uses():
    WorkflowFactory(status="completed", workflow_type="echo")
    payload = json.loads(run_stats("--json", "--hours", "48"))
    assert list(payload) == [report.title for report in stats.all_reports(48)]
    assert payload["Success rate per workflow type, last 48 hours"] == [
        {"workflow_type": "echo", "total": 1, "completed": 1, "success_pct": "100.0"}
    ]


def test_workflow_stats__refuses_a_window_under_an_hour():
    with pytest.raises(CommandError, match="--hours"):
        run_stats("--hours", "0")


def test_outcomes__count_a_paused_run_as_unfinished_apart_from_the_success_rate():
    for status in ("paused", "pending", "completed", "failed"):
        WorkflowFactory(workflow_type="echo", status=status)
    [row] = stats.outcomes().as_dicts()
    assert (row["total"], row["unfinished"], row["completed"], row["failed"]) == (4, 2, 1, 1)
    assert float(row["success_pct"]) == 50.0


def test_queue_depth__counts_a_paused_run_neither_due_nor_waiting_nor_running():
    WorkflowFactory(status="paused")
    WorkflowFactory(status="paused", run_after=timezone.now() - datetime.timedelta(minutes=1), waiting_for="timer:nap")
    assert stats.queue_depth().rows == []

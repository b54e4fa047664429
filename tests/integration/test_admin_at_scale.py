"""The workflow list on a large table: every filter and sort it offers is read
through an index, the list runs under a statement timeout and says so when it
hits, its queue filter reads no rows for its choices, and it never loads a
traceback. (The timings at 10 million rows: ``manage.py benchmark_admin``,
docs/performance.md.)"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models.functions import Coalesce
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from orchestration.admin import limits
from orchestration.models import Workflow
from orchestration.reports import stats
from orchestration.reports.listing import ERROR_INDEX, children_by_status
from tests.admin_support import require_error_index
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:orchestration_workflow_changelist")

# 20,000 rows over 30 days, as a month of work leaves them: mostly completed, a few of each
# rarer kind that a filter picks out. Analyzed, so that the planner weighs them.
LOAD = """
INSERT INTO workflows (workflow_type, status, queue, input_data, created_at, updated_at, worker_id, parent_id,
                       error_traceback, error_message, run_after, waiting_for, tags)
SELECT CASE WHEN g %% 100 = 0 THEN 'rare_type' ELSE 'three_steps' END,
       CASE WHEN g %% 200 = 1 THEN 'failed' WHEN g %% 200 = 2 THEN 'running' WHEN g %% 200 = 3 THEN 'pending'
            WHEN g %% 200 = 4 THEN 'cancelled' ELSE 'completed' END,
       CASE WHEN g %% 100 = 5 THEN 'rare-queue' ELSE 'default' END,
       '{}', now() - make_interval(secs => (20000 - g) * 130), now() - make_interval(secs => (20000 - g) * 130),
       CASE WHEN g %% 200 = 2 THEN 'host:1:ab' END,
       CASE WHEN g %% 1000 = 7 THEN %s::uuid END,
       CASE WHEN g %% 200 = 1 THEN repeat('Traceback line\n', 200) END,
       CASE WHEN g %% 200 = 1 THEN 'ConnectionError: bank ' || g || ' unreachable' END,
       CASE WHEN g %% 400 = 3 THEN now() + interval '1 hour' END,
       CASE WHEN g %% 400 = 3 THEN 'event:approval' END,
       CASE WHEN g %% 100 = 9 THEN '["rare-tag"]'::jsonb WHEN g %% 2 = 0 THEN '["common-tag"]'::jsonb END
FROM generate_series(1, 20000) g
"""


@pytest.fixture
def month(db):
    parent = WorkflowFactory(status="running")
    with connection.cursor() as cursor:
        cursor.execute(LOAD, [str(parent.pk)])
        cursor.execute("ANALYZE workflows, workflow_steps, workflow_tags")
    return parent


def list_queries(admin_client, params: dict[str, str]) -> tuple[str, str]:
    """The SQL of the list's page of rows and of its count, as the admin ran them."""
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(LIST_URL, params)
    assert response.status_code == 200, response.content[:500]
    read = ('FROM "workflows"', 'FROM "workflow_tags"')  # a tag alone is counted from the latter
    statements = [q["sql"] for q in captured.captured_queries if any(table in q["sql"] for table in read)]
    counts = [sql for sql in statements if sql.startswith("SELECT COUNT(*)") and "LIMIT 10001" in sql]
    # The page's rows (with no LIMIT when they all fit on one page).
    page = [sql for sql in statements if re.search(r"ORDER BY [^)]*$", sql) and sql not in counts]
    assert len(page) == 1 and len(counts) == 1, statements
    return page[0], counts[0]


@pytest.fixture
def fan_out(db):
    """A parent of 10,000 children among 40,000 runs of no parent (a third of
    each failed), analyzed."""
    parent = WorkflowFactory(status="pending", waiting_for="children")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, status, input_data, parent_id) "
            "SELECT 'three_steps', CASE WHEN g %% 3 = 0 THEN 'failed' ELSE 'completed' END, '{}', "
            "       CASE WHEN g <= 10000 THEN %s::uuid END "
            "FROM generate_series(1, 50000) g",
            [str(parent.pk)],
        )
        cursor.execute("ANALYZE workflows")
    return parent


def plan_of(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


def column(admin_client, name: str, **params: str) -> str:
    """The ``o`` value that sorts the list on column ``name``."""
    return str(list(admin_client.get(LIST_URL, params).context["cl"].list_display).index(name))


# Each filter, the index its page of rows reads, and whether it picks few rows
# (its count then reads the same index; counting a filter that matches most
# rows stops after 10,001 of them, however they are read).
FILTERS = [
    ({}, "idx_workflows_created", False),
    ({"created_at__gte": "2000-01-01 00:00:00+00:00"}, "idx_workflows_created", False),
    ({"status__exact": "failed"}, "idx_workflows_status", True),
    ({"status__exact": "failed", "o": "CREATED"}, "idx_workflows_status", True),
    ({"workflow_type": "rare_type"}, "idx_workflows_type_created", True),
    ({"queue": "rare-queue"}, "idx_workflows_queue_created", True),
    ({"pending": "waiting"}, "idx_workflows_", True),  # the pending rows: the status or the claim index
    ({"parent": "PARENT"}, "idx_workflows_parent", True),
    ({"parent": "PARENT", "status__exact": "failed"}, "idx_workflows_", True),  # a child's page links it
    ({"worker": "host:1:ab"}, "idx_workflows_running", True),
    ({"q": "rare_type"}, "idx_workflows_type_created", True),
    ({"tag": "rare-tag"}, "workflow_tags_pkey", True),
    ({"tag": "common-tag"}, "workflow_tags_pkey", False),
    ({"tag": "common-tag", "status__exact": "failed"}, "idx_workflows_", True),
]


@pytest.mark.parametrize(("params", "index", "selective"), FILTERS, ids=[str(p) for p, _, _ in FILTERS])
def test_list__each_filter_and_sort_reads_an_index__never_the_whole_table(
    admin_client, month, params, index, selective
):
    created = column(admin_client, "created")
    params = {key: value.replace("PARENT", str(month.pk)).replace("CREATED", created) for key, value in params.items()}
    page, count = list_queries(admin_client, params)
    plan = plan_of(page)
    assert "Seq Scan on workflows" not in plan and index in plan, plan
    if selective:
        plan = plan_of(count)
        assert "Seq Scan on workflows" not in plan and index in plan, plan


def test_list__a_tag_alone_is_counted_from_workflow_tags_without_reading_workflows(admin_client, month):
    _, count = list_queries(admin_client, {"tag": "common-tag"})
    plan = plan_of(count)
    assert "on workflow_tags" in plan and " on workflows" not in plan, plan
    assert admin_client.get(LIST_URL, {"tag": "rare-tag"}).context["cl"].result_count == 200


# Each kind of search term, and the index that answers it (besides those of the
# others, OR-ed in a bitmap): the end of an id, part of a type's name, an error's words.
SEARCHES = [
    ("ID_TAIL", "idx_workflows_id_tail"),
    ("are_ty", "idx_workflows_type_created"),
    ("bank 1001 unreach", "idx_workflows_error_trgm"),
]


@pytest.mark.parametrize(("term", "index"), SEARCHES, ids=[index for _, index in SEARCHES])
def test_list__each_kind_of_search_reads_an_index__never_the_whole_table(admin_client, month, term, index):
    if index == ERROR_INDEX:
        require_error_index()
    term = term.replace("ID_TAIL", str(month.pk)[-8:])
    page, count = list_queries(admin_client, {"q": term})
    for sql in (page, count):
        plan = plan_of(sql)
        assert "Seq Scan on workflows" not in plan and index in plan, plan


def test_list__sorts_running_workflows_by_heartbeat_through_the_running_index(admin_client, month):
    o = column(admin_client, "heartbeat", status__exact="running")
    page, _ = list_queries(admin_client, {"status__exact": "running", "o": o})
    assert 'ORDER BY "workflows"."updated_at" ASC' in page
    plan = plan_of(page)
    assert "Seq Scan on workflows" not in plan and "idx_workflows_running" in plan, plan


def test_list__offers_no_sort_an_index_cannot_answer__not_even_by_hand(admin_client, month):
    response = admin_client.get(LIST_URL)
    assert set(response.context["cl"].sortable_by) == {"created"}
    for name in ("status_label", "type_label", "progress_column", "last_error", "duration", "short_id"):
        page, _ = list_queries(admin_client, {"o": column(admin_client, name)})
        assert 'ORDER BY "workflows"."created_at" DESC, "workflows"."id" DESC' in page, (name, page)


def test_list__runs_under_a_statement_timeout_and_says_so_when_it_hits(admin_client, monkeypatch):
    def slow_lookup():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")
        return []

    monkeypatch.setattr(limits, "LIST_TIME_LIMIT", 0.05)
    monkeypatch.setattr(stats, "workflow_types", slow_lookup)
    response = admin_client.get(LIST_URL, {"status__exact": "failed"})
    html = response.content.decode()
    assert response.status_code == 503
    assert "took longer than 0.05 seconds and was cancelled" in html
    assert "status__exact=failed" in html  # a link to try the same list again
    assert admin_client.get(reverse("admin:orchestration_workflow_overview")).status_code == 200


def test_list__builds_its_queue_choices_without_reading_workflows_and_never_loads_tracebacks(admin_client, month):
    with CaptureQueriesContext(connection) as captured:
        html = admin_client.get(LIST_URL).content.decode()
    assert "?queue=other" in html  # registered by a workflow type
    reading_queues = [q["sql"] for q in captured.captured_queries if '"workflows"."queue"' in q["sql"]]
    assert len(reading_queues) == 1 and "LIMIT" in reading_queues[0], reading_queues  # the page's rows only
    assert not any("error_traceback" in q["sql"] for q in captured.captured_queries)


# -- the overview's reports read no more than their window --------------------------


def test_recent_step_durations__average_the_steps_of_the_last_workflows_started_only():
    old, new = WorkflowFactory(workflow_type="echo"), WorkflowFactory(workflow_type="echo")
    Workflow.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=1))
    moment = timezone.now()
    for workflow, seconds in ((old, 10), (new, 2)):
        WorkflowStepFactory(
            workflow=workflow,
            step_name="send",
            started_at=moment - datetime.timedelta(seconds=seconds),
            completed_at=moment,
        )
    assert stats.recent_step_durations(1).as_dicts() == [
        {"workflow_type": "echo", "step_name": "send", "avg_seconds": Decimal("2.00")}
    ]
    assert stats.recent_step_durations(2).as_dicts()[0]["avg_seconds"] == Decimal("6.00")
    assert stats.step_durations().as_dicts()[0]["avg_seconds"] == Decimal("6.00")  # the seed's, for workflow_stats


def test_hourly_outcomes__read_the_rows_created_since_a_day_before_the_window(month):
    long_run = WorkflowFactory(status="completed", finished_at=timezone.now())
    Workflow.objects.filter(pk=long_run.pk).update(created_at=timezone.now() - datetime.timedelta(days=3))
    short_run = WorkflowFactory(status="completed", finished_at=timezone.now())
    assert stats.hourly_outcomes(24)[-1].completed >= 1
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {stats.HOURLY_OUTCOMES_SQL}", {"back": 23})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on workflows" not in plan, plan
    counted = sum(bucket.completed for bucket in stats.hourly_outcomes(24))
    window = timezone.now().replace(minute=0, second=0, microsecond=0) - datetime.timedelta(hours=23)
    in_window = Workflow.objects.annotate(done=Coalesce("finished_at", "updated_at")).filter(
        status="completed", created_at__gte=window - datetime.timedelta(days=1), done__gte=window
    )
    assert counted == in_window.count() and short_run in in_window and long_run not in in_window


def test_children_by_status__is_one_grouped_query_through_the_parent_index_at_10000_children(fan_out):
    with CaptureQueriesContext(connection) as captured:
        assert children_by_status(fan_out.pk) == {"completed": 6_667, "failed": 3_333}
    (query,) = captured.captured_queries
    plan = plan_of(query["sql"])
    assert "Seq Scan on workflows" not in plan and "idx_workflows_parent" in plan, plan


def test_list__of_a_parents_children_in_one_status_reads_an_index_at_10000_children(admin_client, fan_out):
    page, count = list_queries(admin_client, {"parent": str(fan_out.pk), "status__exact": "failed"})
    for sql in (page, count):
        plan = plan_of(sql)
        assert "Seq Scan on workflows" not in plan and "idx_workflows_" in plan, plan

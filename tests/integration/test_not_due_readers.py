"""The readers of unfinished runs (the console's queue depth and waiting
counts, the metrics' gauges) read no run that waits for their due and running
counts, however many wait, and count the runs that wait exactly up to
``stats.WAITING_EXACT``, past it from a sample, said to be an estimate."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from orchestration.observability import metrics
from orchestration.reports import stats
from tests.integration.test_flow_control import buffers
from tests.integration.test_not_due import QUEUE, WAITING, insert_waiting, start_due
from tests.support import as_migrate_left_them

pytestmark = [pytest.mark.django_db, pytest.mark.serial]  # query plans: see the serial marker


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")


@pytest.mark.parametrize(
    "sql", [stats.QUEUE_DEPTH_SQL, metrics.UNFINISHED_SQL], ids=["queue depth", "metrics' unfinished gauges"]
)
def test_due_and_running_counts__read_no_run_that_waits__with_20000_waiting(sql):
    as_migrate_left_them()  # measured beside the dead rows of earlier tests, the margin below would be theirs
    start_due(3)
    analyze()
    # What the counts read with no run waiting.
    alone = buffers(explain(sql), "Aggregate")
    insert_waiting(WAITING)
    analyze()
    plan = explain(sql)
    # idx_workflows_status is read for the paused runs only (held by an operator: neither due nor waiting).
    status_reads = re.findall(r"idx_workflows_status .*\n\s*Index Cond: \(\(status\)::text = '(\w+)'", plan)
    assert "Seq Scan" not in plan and plan.count("idx_workflows_status") == status_reads.count("paused"), plan
    assert buffers(plan, "Aggregate") < alone + 20, (alone, plan)


def test_waiting_runs__up_to_the_exact_limit__are_counted_exactly():
    insert_waiting(10)
    waiting = stats.waiting_runs()
    assert not waiting.estimated
    assert waiting.by_kind() == {"timer": 2, "event": 2, "children": 2, "worker": 0}
    assert waiting.by_queue() == {QUEUE: (6, 4)}


def test_waiting_runs__past_the_exact_limit__are_estimated_from_a_sample():
    insert_waiting(WAITING)
    analyze()  # the sample's size comes from the statistics
    waiting = stats.waiting_runs()
    assert waiting.estimated
    waits, later = waiting.by_queue()[QUEUE]
    # Three in five runs wait for something, two in five are due later; a sample is near, never exact.
    assert 0.6 * WAITING * 0.7 < waits < 0.6 * WAITING * 1.3, waiting
    assert 0.4 * WAITING * 0.7 < later < 0.4 * WAITING * 1.3, waiting


def test_queue_depth__says_its_waiting_counts_are_estimated_past_the_exact_limit():
    insert_waiting(WAITING)
    start_due(2)
    analyze()
    (row,) = stats.queue_depth().as_dicts()
    assert (row["queue"], row["due"], row["estimated"]) == (QUEUE, 2, True)


def test_stuck_report__reads_the_running_runs_only__with_20000_waiting():
    # The seed's query, verbatim, as the stuck sweep's: what keeps it fast is idx_workflows_running.
    insert_waiting(WAITING)
    analyze()
    plan = explain(stats.STUCK_SQL.rstrip().rstrip(";"))
    assert "idx_workflows_running" in plan and "Seq Scan" not in plan, plan

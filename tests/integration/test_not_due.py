"""Runs that are not due yet (timers, events, delayed starts, backoffs,
parents of unfinished children) are never read by a claim, however many
wait in front of the due ones, and a run whose wait has passed is taken by
the next claim."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection, transaction

from orchestration import pause_queue, set_queue_limits, workflow
from orchestration.claim import claims, statements
from orchestration.models import Workflow, WorkflowStatus
from tests.integration.test_flow_control import buffers, generic_plan

pytestmark = [pytest.mark.django_db, pytest.mark.serial]  # query plans: see the serial marker

QUEUE = "nd"


@workflow("nd_noop", queue=QUEUE)
def nd_noop(ctx: Any, data: Any) -> Any:
    return data


#: One waiting run of each kind, as the engine writes them: (run_after, waiting_for, error_message).
WAITS = {
    "timer": ("now() + interval '14 days'", "'timer: trial until 2030-01-01 00:00:00 UTC'", "NULL"),
    "event": ("'9999-01-01'::timestamptz", "'event: approved'", "NULL"),
    "children": ("'9999-01-01'::timestamptz", "'children: 0 of 2 finished'", "NULL"),
    "delayed start": ("now() + interval '1 hour'", "NULL", "NULL"),
    "backoff": ("now() + interval '30 seconds'", "NULL", "'boom'"),
}

#: The limits that make each variant of the claim run (the table in ``orchestration.claim``).
VARIANTS = {
    "plain": {},
    "in a lane": {"concurrency": 10_000},
    "counted": {"concurrency": 5},
    "limited": {"rate_limit": "1000/s"},
    "keyed": {"key_concurrency": 1},
}


def insert_waiting(count: int, *, keyed: bool = False) -> None:
    """``count`` waiting runs of queue ``nd``, an hour older than any run started
    now, each kind of wait in turn (each its own key, when ``keyed``)."""
    kinds = list(WAITS.values())
    run_after = "CASE mod(n, 5) " + " ".join(f"WHEN {i} THEN {kind[0]}" for i, kind in enumerate(kinds)) + " END"
    waiting_for = "CASE mod(n, 5) " + " ".join(f"WHEN {i} THEN {kind[1]}" for i, kind in enumerate(kinds)) + " END"
    error = "CASE mod(n, 5) " + " ".join(f"WHEN {i} THEN {kind[2]}" for i, kind in enumerate(kinds)) + " END"
    key = "'k' || n" if keyed else "NULL"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, concurrency_key, run_after, waiting_for, error_message, "
            f"created_at) SELECT 'nd_noop', %s, {key}, {run_after}, {waiting_for}, {error}, "
            "now() - interval '1 hour' + n * interval '1 ms' FROM generate_series(1, %s) AS n",
            [QUEUE, count],
        )


def start_due(count: int, *, keyed: bool = False, **columns: Any) -> list[Workflow]:
    return [
        Workflow.objects.create(
            workflow_type="nd_noop", queue=QUEUE, concurrency_key=f"due-{n}" if keyed else None, **columns
        )
        for n in range(count)
    ]


def use(variant: str) -> None:
    if VARIANTS[variant]:
        set_queue_limits(QUEUE, **VARIANTS[variant])


@pytest.mark.parametrize("variant", VARIANTS)
def test_claim__of_every_variant__takes_no_run_that_waits(variant):
    use(variant)
    insert_waiting(len(WAITS) * 2, keyed=variant == "keyed")
    due = start_due(2, keyed=variant == "keyed")
    runs = claims.claim("w", None, limit=20)
    assert {run.id for run in runs} == {run.pk for run in due}
    assert Workflow.objects.filter(status=WorkflowStatus.PENDING).count() == len(WAITS) * 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_claim__of_every_variant__takes_a_run_whose_wait_has_passed_at_once(variant):
    use(variant)
    insert_waiting(len(WAITS), keyed=variant == "keyed")
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - interval '1 second'")
        (passed,) = cursor.fetchone()
    (timer,) = start_due(1, keyed=variant == "keyed", run_after=passed, waiting_for="timer: nap")
    assert [run.id for run in claims.claim("w", None, limit=20)] == [timer.pk]
    timer.refresh_from_db()
    assert (timer.status, timer.run_after, timer.waiting_for) == (WorkflowStatus.RUNNING, None, None)


def test_claim__of_a_paused_queue__makes_due_its_runs_whose_wait_passed_up_to_its_limit_the_earliest_first():
    pause_queue(QUEUE)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, run_after) SELECT 'nd_noop', %s, "
            "now() - interval '1 hour' + n * interval '1 s' FROM generate_series(1, 10) AS n",
            [QUEUE],
        )
    earliest = set(Workflow.objects.order_by("run_after").values_list("pk", flat=True)[:3])
    assert claims.claim("w", None, limit=3) == []
    assert set(Workflow.objects.filter(run_after__isnull=True).values_list("pk", flat=True)) == earliest


# -- plans, with many runs waiting in front of the due ones ------------------------


WAITING = 20_000


def plain_claim_plan() -> str:
    """The plain claim's plan, run and rolled back (EXPLAIN ANALYZE, BUFFERS)."""
    statement, params = claims.claim_statement("w", None, [], 4)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statements.INDEX_PLANS_ONLY)
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    return plan


def limit_aware_claim_plan(variant: str) -> str:
    statement, params = claims.claim_statement("w", None, [], 4, limited=True, keys_or_rates=variant != "counted")
    with transaction.atomic():
        plan = generic_plan(statement, params)
        transaction.set_rollback(True)
    return plan


def test_claim_plan__plain__reads_the_due_runs_only__with_20000_runs_waiting_in_front():
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")  # the statistics of an empty table, as migrate left them
    start_due(3)
    # What the claim reads with no run waiting: the test database's dead rows of earlier tests included.
    alone = buffers(plain_claim_plan(), "CTE claimed")
    insert_waiting(WAITING)
    plan = plain_claim_plan()
    # The due runs in claim order, and those whose wait has passed (none): two index ranges.
    assert "Index Scan using idx_workflows_due" in plan and "Index Scan using idx_workflows_waiting" in plan, plan
    assert not re.search("Rows Removed by Filter: [1-9]", plan), plan
    assert buffers(plan, "CTE claimed") < alone + 20, (alone, plan)


def test_claim_plan__plain__reads_the_runs_whose_wait_passed_in_order__of_a_table_analysed_with_none_pending():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, status) SELECT 'nd_noop', %s, 'completed' "
            "FROM generate_series(1, %s)",
            [QUEUE, WAITING],
        )
        cursor.execute("ANALYZE workflows")  # nothing pending: every index of pending runs looks free
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, run_after, waiting_for) SELECT 'nd_noop', %s, "
            "now() - interval '1 second', 'timer: nap' FROM generate_series(1, %s)",
            [QUEUE, WAITING],
        )
    statement, params = claims.claim_statement("w", None, [], 4)
    with transaction.atomic():
        plan = generic_plan(statement, params)
        transaction.set_rollback(True)
    # A million timers ending at once: each claim reads its few, not every one of them sorted.
    passed = plan.split("Subquery Scan on passed", 1)[1].split("CTE taken", 1)[0]
    assert "Index Scan using idx_workflows_waiting" in passed and "Sort" not in passed, plan
    assert "JIT" not in plan, plan  # the price of the sort every plan needs is no reason to compile


def making_due_plan() -> str:
    with connection.cursor() as cursor:
        cursor.execute(statements.INDEX_PLANS_ONLY)
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statements.MAKE_DUE.replace("{limit}", "4"), {"queues": None}
        )
        return "\n".join(row[0] for row in cursor.fetchall())


def test_making_due_plan__reads_the_runs_whose_wait_passed_only__with_20000_runs_waiting():
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
    # What it reads with no run waiting: the test database's dead rows of earlier tests included.
    alone = buffers(making_due_plan(), "Update on workflows")
    insert_waiting(WAITING)
    plan = making_due_plan()
    assert "Index Scan using idx_workflows_waiting" in plan, plan
    assert not re.search("Rows Removed by Filter: [1-9]", plan), plan
    assert buffers(plan, "Update on workflows") < alone + 20, (alone, plan)


@pytest.mark.parametrize("variant", ["counted", "limited", "keyed"])
def test_claim_plan__limit_aware__reads_the_due_runs_only__with_20000_runs_waiting_in_front(variant):
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
    use(variant)
    start_due(3, keyed=variant == "keyed")
    # What the claim reads with no run waiting: the test database's dead rows of earlier tests included.
    alone = buffers(limit_aware_claim_plan(variant), "CTE claimed")
    insert_waiting(WAITING, keyed=variant == "keyed")
    plan = limit_aware_claim_plan(variant)
    assert re.search(r"Update on workflows w_\d+ \(actual time=[\d.]+ rows=3 ", plan), plan
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
    assert buffers(plan, "CTE claimed") < alone + 100, (alone, plan)

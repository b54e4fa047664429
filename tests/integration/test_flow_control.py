"""Flow control: a queue's pause, concurrency, per-key and rate limits, as the
claim enforces them, the API and the settings that set them, and the admin
and the command that show and change them."""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection, connections, transaction
from django.db.models import F
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from psycopg import sql

from orchestration import (
    InvalidQueueLimit,
    InvalidWorkflowInput,
    UnknownQueue,
    flow,
    pause_queue,
    resume_queue,
    set_queue_limits,
    start_workflow,
    start_workflows,
    workflow,
)
from orchestration.checks import check_settings
from orchestration.claim import claims, rules, statements
from orchestration.models import QueueStart, Workflow, WorkflowQueue, WorkflowStatus
from orchestration.worker import Outcome, Worker, dispatch
from tests.acceptance.test_runworkers import wait_for
from tests.admin_support import staff_user
from tests.factories import WorkflowWorkerFactory
from tests.support import drain, other_connection

pytestmark = pytest.mark.django_db

QUEUE_LIST_URL = reverse("admin:orchestration_workflowqueue_changelist")


@workflow("fc_noop", queue="fc")
def fc_noop(ctx: Any, data: Any) -> Any:
    return data


@workflow("fc_keyed", queue="fc_keys", concurrency_key=lambda data: data["key"])
def fc_keyed(ctx: Any, data: Any) -> Any:
    return data


@workflow("fc_free", queue="fc_free")
def fc_free(ctx: Any, data: Any) -> Any:
    return data


@workflow("fc_naps", queue="fc")
def fc_naps(ctx: Any, seconds: float | None) -> Any:
    ctx.sleep("nap", seconds or 3600)
    return ctx.step("after", lambda: "woke")


def claim(limit: int = 10, queues: list[str] | None = None) -> list[Any]:
    """Claim as a worker does, reading the queues' rules now."""
    return claims.claim("w", queues, limit)


def complete_and_claim(runs: list[Any], limit: int) -> list[Any]:
    finished = [claims.FinishedRun(run, "null", 0.0) for run in runs]
    return claims.finish_and_claim("w", None, finished, limit)[0]


def running(queue: str) -> int:
    return Workflow.objects.filter(queue=queue, status=WorkflowStatus.RUNNING).count()


# -- the API ---------------------------------------------------------------------------


def test_set_queue_limits__unknown_queue__raises_and_writes_nothing():
    with pytest.raises(UnknownQueue, match="No queue 'nowhere'"):
        set_queue_limits("nowhere", concurrency=2)
    with pytest.raises(UnknownQueue):
        pause_queue("nowhere")
    assert not WorkflowQueue.objects.exists()


@pytest.mark.parametrize(
    "limits",
    [
        {"concurrency": 0},
        {"concurrency": -3},
        {"key_concurrency": True},
        {"concurrency": 1.5},
        {"concurrency": "3"},
        {"rate_limit": "100/d"},
        {"rate_limit": "0/m"},
        {"rate_limit": "10/min"},
        {"key_rate_limit": 100},
        {"concurrency": 5, "rate_limit": "many/s"},
    ],
)
def test_set_queue_limits__a_non_positive_limit_or_a_malformed_rate__raises_and_writes_nothing(limits):
    with pytest.raises(InvalidQueueLimit):
        set_queue_limits("fc", **limits)
    assert not WorkflowQueue.objects.exists()


def test_set_queue_limits__none_lifts_a_limit__one_not_given_stays():
    set_queue_limits("fc", concurrency=3, rate_limit="100/m")
    row = set_queue_limits("fc", concurrency=None, key_concurrency=2)
    assert (row.concurrency, row.key_concurrency, row.rate_limit, row.paused) == (None, 2, "100/m", False)
    assert not row.limits_from_settings


@pytest.mark.parametrize("key", ["k" * 256, "", 4.5, ["a"]])
def test_start_workflow__a_bad_concurrency_key__raises_and_writes_nothing(key):
    with pytest.raises(InvalidWorkflowInput, match="concurrency_key"):
        start_workflow("fc_noop", concurrency_key=key)
    with pytest.raises(InvalidWorkflowInput, match="concurrency_key"):
        start_workflows("fc_noop", [1, 2], concurrency_keys=["ok", key])
    assert not Workflow.objects.exists()


def test_concurrency_key__given__from_the_decorator__per_run_in_a_batch():
    assert start_workflow("fc_noop", concurrency_key="customer-42").concurrency_key == "customer-42"
    assert start_workflow("fc_keyed", {"key": 7}).concurrency_key == "7"  # a whole number becomes its text
    batch = start_workflows("fc_keyed", [{"key": "a"}, {"key": "b"}, {"key": "a"}])
    same = start_workflows("fc_noop", [1, 2], concurrency_keys=["c", "c"])
    rows = Workflow.objects.filter(pk__in=[w.pk for w in batch + same]).order_by("created_at", "id")
    assert [w.concurrency_key for w in batch + same] == ["a", "b", "a", "c", "c"]
    assert sorted(rows.values_list("concurrency_key", flat=True)) == ["a", "a", "b", "c", "c"]
    with pytest.raises(InvalidWorkflowInput, match="concurrency_key function of workflow 'fc_keyed' failed"):
        start_workflow("fc_keyed", {"no key": 1})


def test_settings__dict_form_gives_the_defaults__an_operator_change_stays__settings_changes_apply_otherwise():
    base = {"QUEUES": {"fc": {"concurrency": 5, "rate_limit": "10/s"}, "fc_free": None}}
    with override_settings(ORCHESTRATION=base):
        flow.sync_settings()
        row = WorkflowQueue.objects.get()
        assert (row.name, row.concurrency, row.rate_limit, row.limits_from_settings) == ("fc", 5, "10/s", True)
    with override_settings(ORCHESTRATION={"QUEUES": {"fc": {"concurrency": 7}}}):
        flow.sync_settings()
        assert WorkflowQueue.objects.values_list("concurrency", "rate_limit").get() == (7, None)
        set_queue_limits("fc", concurrency=2)  # the operator's value wins from now on
    with override_settings(ORCHESTRATION={"QUEUES": {"fc": {"concurrency": 9}}}):
        flow.sync_settings()
        assert WorkflowQueue.objects.values_list("concurrency", flat=True).get() == 2
    WorkflowQueue.objects.all().delete()
    with override_settings(ORCHESTRATION={"QUEUES": {"fc": {"key_concurrency": 1}}}):
        pause_queue("fc")  # made from the settings first, then paused
        assert WorkflowQueue.objects.values_list("key_concurrency", "paused").get() == (1, True)
    with override_settings(ORCHESTRATION={"QUEUES": ["fc"]}):  # the list form: no limits
        flow.sync_settings()
        assert WorkflowQueue.objects.values_list("key_concurrency", "paused").get() == (None, True)
        resume_queue("fc")
        flow.sync_settings()  # as a worker's restart does: the row stays, limiting nothing
        assert WorkflowQueue.objects.values_list("name", "key_concurrency", "paused").get() == ("fc", None, False)


@pytest.mark.parametrize(
    "queues, problem",
    [
        (["fc", "payments"], None),
        ({"payments": {"concurrency": 5, "key_concurrency": 1, "rate_limit": "100/m"}, "fc": None}, None),
        ({"payments": {"concurrency": 0}}, "concurrency must be a whole number above 0"),
        ({"payments": {"rate_limit": "100 a minute"}}, "A rate limit is written N/s"),
        ({"payments": {"speed": 3}}, "'speed' is not a queue limit"),
        ({"payments": 5}, "its limits must be a dict"),
        ("payments", "it must be a list of queue names or a dict"),
    ],
)
def test_system_check__validates_queues_in_either_form(queues, problem):
    with override_settings(ORCHESTRATION={"QUEUES": queues}):
        errors = [error for error in check_settings() if error.id == "orchestration.E005"]
    assert [problem in error.msg for error in errors] == ([True] if problem else [])


# -- the claim -------------------------------------------------------------------------


def test_claim__concurrency_limit__counts_every_running_run__a_completion_in_the_same_statement_frees_its_slot():
    start_workflows("fc_noop", range(10))
    start_workflows("fc_free", range(3))
    set_queue_limits("fc", concurrency=3)
    first = claim(limit=10)
    assert running("fc") == 3 and running("fc_free") == 3  # a queue without limits claims as before
    assert claim() == []
    done = [run for run in first if run.queue == "fc"][:2]
    assert len(complete_and_claim(done, 10)) == 2 and running("fc") == 3


@contextlib.contextmanager
def giving_up_lock_waits_after_200ms() -> Iterator[None]:
    """This test's claims give up a wait for a lock after 0.2 s, and wait again as before after the block."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '200ms'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


@contextlib.contextmanager
def in_another_claims_turn(queue: str) -> Iterator[None]:
    """Another connection holds ``queue``'s claim locks (its turn and its lanes),
    as a claim in flight in its turn does, while this test's claims give up a
    wait for them after 0.2 s."""
    with other_connection(autocommit=False) as other:
        other.execute(
            "SELECT pg_advisory_xact_lock(%s + lane, hashtext(%s)) FROM generate_series(0, %s) AS lane",
            [statements.QUEUE_LOCK_SPACE, queue, statements.QUEUE_LANES],
        )
        with giving_up_lock_waits_after_200ms():
            yield


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "completed, asked",
    [(2, 2), (1, 3)],
    ids=["asking-no-more-than-it-completes", "asking-more-with-room-for-more"],
)
def test_claim__in_another_claims_turn__one_that_completes_runs_hands_over_as_many_without_waiting(completed, asked):
    start_workflows("fc_noop", range(10))
    set_queue_limits("fc", concurrency=5)
    first = claim(limit=3)
    with in_another_claims_turn("fc"):
        assert len(complete_and_claim(first[:completed], asked)) == completed
    assert running("fc") == 3
    assert len(claim(limit=5)) == 2, "its turn come, the rest of the room"


@pytest.mark.django_db(transaction=True)
def test_claim__in_another_claims_turn__one_that_completes_nothing_waits_for_it():
    start_workflows("fc_noop", range(3))
    set_queue_limits("fc", concurrency=5)
    with in_another_claims_turn("fc"), pytest.raises(OperationalError, match="lock timeout"):
        claim(limit=1)


@contextlib.contextmanager
def a_claim_in_flight(limit: int) -> Iterator[None]:
    """A claim of another worker, on its own connection, uncommitted until the block ends."""
    claimed, release = threading.Event(), threading.Event()

    def claim_and_hold() -> None:
        try:
            with transaction.atomic():
                claims.claim("other", None, limit)
                claimed.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=claim_and_hold)
    thread.start()
    try:
        assert claimed.wait(10)
        yield
    finally:
        release.set()
        thread.join()


@pytest.mark.django_db(transaction=True)
def test_claim__far_from_the_limit__claims_beside_a_claim_in_flight_without_waiting_for_its_turn():
    start_workflows("fc_noop", range(10))
    set_queue_limits("fc", concurrency=1000)
    with a_claim_in_flight(limit=3), giving_up_lock_waits_after_200ms():
        assert len(claim(limit=3)) == 3
    assert running("fc") == 6


@pytest.mark.django_db(transaction=True)
def test_claim__far_from_the_limit__waits_for_a_claim_in_its_turn():
    start_workflows("fc_noop", range(100))
    set_queue_limits("fc", concurrency=1000)
    in_its_turn = a_claim_in_flight(limit=statements.LANE_CLAIM + 1)  # too many for a lane
    with in_its_turn, giving_up_lock_waits_after_200ms(), pytest.raises(OperationalError, match="lock timeout"):
        claim(limit=3)
    assert running("fc") == statements.LANE_CLAIM + 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "limit",
    [statements.LANE_MARGIN + 5, 3 * statements.LANE_MARGIN + 5],
    ids=["near from the start", "far, then near"],
)
def test_claim__claims_in_flight_side_by_side_near_the_limit__take_no_more_than_it__and_fill_it(limit: int):
    start_workflows("fc_noop", range(limit + 100))
    set_queue_limits("fc", concurrency=limit)
    start = threading.Barrier(statements.QUEUE_LANES + 2)

    def claim_in_turns() -> None:
        try:
            start.wait(10)
            for _ in range(4):
                with transaction.atomic():
                    claims.claim("w", None, statements.LANE_CLAIM)
                    time.sleep(0.05)  # uncommitted beside the others' claims
        finally:
            connection.close()

    threads = [threading.Thread(target=claim_in_turns) for _ in range(statements.QUEUE_LANES + 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert running("fc") == limit


def running_index_scans() -> int:
    """The scans of ``idx_workflows_running`` (the running runs' index) this
    backend has made and not yet reported, the current transaction's among them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_numscans('idx_workflows_running'::regclass)")
        return cursor.fetchone()[0]


def analyze_with_finished_runs(queue: str, count: int = 3000) -> None:
    """Give the planner a queue's usual shape, many finished runs beside a few
    running ones, so that it counts the running runs by their index whatever
    statistics earlier tests left behind."""
    Workflow.objects.bulk_create(
        Workflow(workflow_type="fc_noop", queue=queue, status=WorkflowStatus.COMPLETED, input_data={})
        for _ in range(count)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")


def counted_claim(limit: int) -> tuple[int, int]:
    """The runs a claim took, and how often it counted the running runs."""
    with transaction.atomic():
        before = running_index_scans()
        runs = claim(limit=limit)
        return len(runs), running_index_scans() - before


@pytest.mark.django_db(transaction=True)
def test_claim_in_a_lane__counts_the_queues_running_runs_before_taking_the_lane_and_once_it_holds_it():
    start_workflows("fc_noop", range(10))
    analyze_with_finished_runs("fc")
    set_queue_limits("fc", concurrency=1000)
    assert counted_claim(3) == (3, 2)
    assert counted_claim(3) == (3, 2), "the same again: nothing noted for the next claim"


@pytest.mark.django_db(transaction=True)
def test_claim__within_a_lanes_margin_of_the_limit__takes_its_turn():
    start_workflows("fc_noop", range(10))
    analyze_with_finished_runs("fc")
    set_queue_limits("fc", concurrency=1000)
    claim(limit=3)
    set_queue_limits("fc", concurrency=3 + statements.LANE_MARGIN - 1)
    assert counted_claim(3) == (3, 2)  # before the lane, then in its turn
    assert running("fc") == 6


def test_claim__a_hand_over__takes_none_while_the_queue_runs_over_a_lowered_limit():
    start_workflows("fc_noop", range(6))
    set_queue_limits("fc", concurrency=3)
    first = claim(limit=3)
    set_queue_limits("fc", concurrency=1)
    assert complete_and_claim(first[:1], 1) == [] and complete_and_claim(first[1:2], 1) == []
    assert len(complete_and_claim(first[2:], 1)) == 1 and running("fc") == 1


def test_claim__a_hand_over__of_a_run_no_longer_held__takes_no_slot():
    start_workflows("fc_noop", range(3))
    set_queue_limits("fc", concurrency=1)
    [run] = claim(limit=1)
    Workflow.objects.filter(pk=run.id).update(lease_token=uuid.uuid4())  # reclaimed meanwhile: another lease
    assert complete_and_claim([run], 1) == [] and running("fc") == 1


def test_claim__waiting_runs_hold_no_slot():
    start_workflows("fc_naps", [None] * 3)
    set_queue_limits("fc", concurrency=1)
    assert drain() == ["waiting"] * 3  # one at a time, each released to pending as it starts to wait
    assert Workflow.objects.filter(status=WorkflowStatus.PENDING, waiting_for__startswith="timer").count() == 3


def test_claim__per_key_limit__one_run_of_each_key__a_saturated_key_holds_back_no_other():
    start_workflows("fc_keyed", [{"key": "hot"}] * 20 + [{"key": "a"}, {"key": "b"}, {"key": "b"}])
    set_queue_limits("fc_keys", key_concurrency=1)
    assert sorted(run.input_data["key"] for run in claim()) == ["a", "b", "hot"]
    assert claim() == []


def test_claim__keys_take_turns_from_the_key_after_the_last_one_served():
    start_workflows("fc_keyed", [{"key": f"k{n}"} for n in range(1, 6)] * 3)
    set_queue_limits("fc_keys", key_concurrency=1)
    turns, runs = [], claim(limit=2)
    for _ in range(4):
        turns.append(sorted(run.input_data["key"] for run in runs))
        runs = complete_and_claim(runs, 2)
    assert turns == [["k1", "k2"], ["k3", "k4"], ["k1", "k5"], ["k2", "k3"]]


def test_claim__rate_limit__counts_the_claims_of_the_last_period__and_forgets_older_ones():
    start_workflows("fc_noop", range(10))
    set_queue_limits("fc", rate_limit="3/m")
    assert len(claim()) == 3 and claim() == []
    QueueStart.objects.update(started_at=F("started_at") - datetime.timedelta(seconds=61))
    assert len(claim()) == 3
    assert QueueStart.objects.count() == 3, "the claims of an earlier period are forgotten"


def test_claim__key_rate_limit__counts_each_key_apart():
    start_workflows("fc_keyed", [{"key": "a"}] * 3 + [{"key": "b"}] * 3)
    set_queue_limits("fc_keys", key_rate_limit="1/h")
    assert sorted(run.input_data["key"] for run in claim()) == ["a", "b"]
    assert claim() == []


def test_claim__paused_queue__none_of_its_runs__other_queues_as_before__resume_claims_again():
    paused = start_workflows("fc_noop", range(3))
    start_workflows("fc_free", range(2))
    pause_queue("fc")
    assert {run.queue for run in claim()} == {"fc_free"}
    assert claim() == []
    resume_queue("fc")
    assert {run.id for run in claim()} == {workflow.pk for workflow in paused}


def test_pause__a_timer_that_ends_while_paused__wakes_into_pending_and_waits_for_the_resume():
    napping = start_workflow("fc_naps", 0.3)
    assert drain() == ["waiting"]
    pause_queue("fc")
    time.sleep(0.4)
    assert Workflow.objects.filter(pk=napping.pk, run_after__lte=timezone.now()).exists(), "due, pending"
    assert claim() == []
    resume_queue("fc")
    assert drain() == ["completed"]


def test_claim__a_limited_queue_claims_by_priority_then_age():
    low = start_workflow("fc_noop", priority=-1)
    old, new = start_workflow("fc_noop", 1), start_workflow("fc_noop", 2)
    high = start_workflow("fc_noop", priority=5)
    set_queue_limits("fc", concurrency=10)
    assert [run.id for run in claim(limit=1) + claim(limit=1) + claim(limit=2)] == [high.pk, old.pk, new.pk, low.pk]


def generic_plan(statement: str, params: dict[str, Any]) -> str:
    """The workers' plan of ``statement``: its prepared generic plan under
    ``statements.INDEX_PLANS_ONLY_NO_JIT``, run with ``params`` (EXPLAIN ANALYZE, BUFFERS)."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
    text = re.sub(r"%\((\w+)\)s", lambda match: f"${names.index(match.group(1)) + 1}", statement)

    def literal(value: Any) -> str:
        if isinstance(value, list):  # an array, as psycopg writes it
            return sql.Literal(value).as_string(connection.connection)
        return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(statements.INDEX_PLANS_ONLY_NO_JIT)
        cursor.execute("PREPARE flow_claim AS " + text)
        arguments = ", ".join(literal(params[name]) for name in names)
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE flow_claim({arguments})")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE flow_claim")
    return plan


def buffers(plan: str, node: str) -> int:
    """The buffers that ``node`` of ``plan`` read, those of the nodes under it included."""
    below = plan.split(node, 1)[1]
    return sum(map(int, re.findall(r"(?:hit|read)=(\d+)", below.split("Buffers:", 1)[1].split("\n", 1)[0])))


def test_taking_a_lane__counts_the_queues_running_runs_once():
    start_workflows("fc_noop", range(3))
    set_queue_limits("fc", concurrency=1000)
    plan = generic_plan(statements.TAKE_LANE, {"queues": None, "space": statements.QUEUE_LOCK_SPACE})
    assert len(re.findall(r" on workflows ", plan)) == 1, plan


def test_counting_in_a_lane__counts_the_queues_running_runs_once():
    start_workflows("fc_noop", range(3))
    set_queue_limits("fc", concurrency=1000)
    plan = generic_plan(statements.FREE_IN_LANE, {"queues": None, "lane_queue": "fc"})
    assert len(re.findall(r" on workflows ", plan)) == 1, plan


@pytest.mark.serial  # a query plan
def test_claim_plan__a_saturated_key_with_100000_pending__is_never_read():
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")  # the statistics of an empty table, as migrate left them
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, concurrency_key, created_at) "
            "SELECT 'fc_keyed', 'fc_keys', 'hot', now() - interval '1 hour' + n * interval '1 ms' "
            "FROM generate_series(1, 100000) AS n"
        )
    start_workflows("fc_keyed", [{"key": "hot"}, {"key": "cold-1"}, {"key": "cold-2"}])
    Workflow.objects.filter(pk=Workflow.objects.filter(concurrency_key="hot").order_by("created_at")[0].pk).update(
        status=WorkflowStatus.RUNNING
    )
    set_queue_limits("fc_keys", key_concurrency=1)
    plan = generic_plan(*claims.claim_statement("w", ["fc_keys"], [], 4, limited=True))
    assert "idx_workflows_key_due" in plan and "Seq Scan" not in plan and "Bitmap" not in plan, plan
    assert re.search(r"Update on workflows w_\d+ \(actual time=[\d.]+ rows=2 ", plan), plan  # the two cold keys
    # Reading the hot key's backlog would take thousands (a previous test's rolled-back rows may lie between queues).
    # What "taken" reads is its join; its update's own writes (an entry in each index, two rows) are not a read.
    taken = plan.split("CTE taken", 1)[1]
    assert buffers(plan, "CTE candidate") < 300 and buffers(taken, "Nested Loop") < 300, plan


def paused_backlog() -> list[Workflow]:
    """Queue ``fc`` paused with 20,000 runs pending, and 3 runs of ``fc_free`` (returned) due."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, created_at) "
            "SELECT 'fc_noop', 'fc', now() - interval '1 hour' + n * interval '1 ms' "
            "FROM generate_series(1, 20000) AS n"
        )
    free = start_workflows("fc_free", range(3))
    pause_queue("fc")
    return free


def queues_probed_by(plan: str) -> list[str]:
    """The indexes that CTE ``pending_queue`` of ``plan`` (the queues with due runs) reads."""
    return re.findall(r" using (\w+)", plan.split("CTE pending_queue", 1)[1].split("\n  CTE ", 1)[0])


@pytest.mark.serial  # a query plan
def test_claim_plan__a_paused_queue_with_a_backlog__slows_no_other_queue():
    free = paused_backlog()
    plan = generic_plan(*claims.claim_statement("w", None, [], 4, limited=True))
    assert re.search(r"Update on workflows w_\d+ \(actual time=[\d.]+ rows=3 ", plan), plan
    assert set(queues_probed_by(plan)) == {"idx_workflows_queue_due"}, plan
    # Each queue's runs are read from its own part of idx_workflows_queue_due: the paused one's not at all.
    runs_read = plan.split("CTE candidate", 1)[1].split("CTE claimed", 1)[0]
    assert buffers(runs_read, "Append") < 50 and "rows=20000" not in plan, plan
    assert running("fc_free") == len(free)


@pytest.mark.serial  # a query plan
def test_claim_plan__counted__a_paused_queue_with_a_backlog__slows_no_other_queue():
    free = paused_backlog()
    plan = generic_plan(*claims.claim_statement("w", None, [], 4, limited=True, keys_or_rates=False))
    assert re.search(r"Update on workflows w_\d+ \(actual time=[\d.]+ rows=3 ", plan), plan
    # One probe of idx_workflows_queue_due a queue; the statistics say the table is empty, and
    # min(queue) was once read from the whole of idx_workflows_due, every due run (rows=20003).
    assert set(queues_probed_by(plan)) == {"idx_workflows_queue_due"}, plan
    # Each queue's runs are read from its own part of idx_workflows_queue_due (room's reads are claimed's too).
    assert buffers(plan, "CTE claimed") - buffers(plan, "CTE room") < 50 and "rows=20000" not in plan, plan
    assert running("fc_free") == len(free)


@pytest.mark.serial  # a query plan
@pytest.mark.parametrize(
    "limits, keys_or_rates",
    [({"concurrency": 8}, True), ({"concurrency": 8}, False), ({"key_concurrency": 1}, True)],
    ids=["concurrency", "concurrency, counted", "per key"],
)
def test_claim_plan__runs_completed_in_the_claim__given_back_without_reading_the_queue_finished_runs(
    limits, keys_or_rates
):
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
        cursor.execute(
            "INSERT INTO workflows (workflow_type, queue, concurrency_key, status, created_at) "
            "SELECT 'fc_keyed', 'fc_keys', 'k' || n % 100, 'completed', now() - n * interval '1 ms' "
            "FROM generate_series(1, 20000) AS n"
        )
    start_workflows("fc_keyed", [{"key": f"k{n}"} for n in range(8)])
    set_queue_limits("fc_keys", **limits)
    finished = [claims.FinishedRun(run, "null", 0.0) for run in claim(limit=4, queues=["fc_keys"])]
    plan = generic_plan(*claims.claim_statement("w", ["fc_keys"], finished, 4, True, keys_or_rates))
    assert re.search(r"Update on workflows w_\d+ \(actual time=[\d.]+ rows=4 ", plan), plan
    # Joined back to the queue's rows, the runs completed read every finished one, at every claim.
    most_rows_read = max(int(n) for n in re.findall(r"(?:rows=|Rows Removed by \w+ ?\w*: )(\d+)", plan))
    assert most_rows_read < 100, plan


# -- the workers -----------------------------------------------------------------------


def test_rules__a_worker_reads_them_again_once_a_poll_interval():
    cache = rules.RulesCache(["fc"], interval=3600)
    assert cache.current() == rules.Rules()
    set_queue_limits("fc", concurrency=2)
    assert cache.current() == rules.Rules(), "not before the interval has passed"
    assert rules.RulesCache(["fc"], interval=0).current() == rules.Rules(limited=True)
    assert rules.rules_of(["fc_free"]) == rules.Rules()
    set_queue_limits("fc_free", concurrency=None)  # a row with no limit, not paused, limits nothing
    assert rules.rules_of(["fc_free"]) == rules.Rules()
    pause_queue("fc_free")
    assert rules.rules_of(None) == rules.rules_of(["fc_free"]) == rules.Rules(limited=True)


def test_dispatcher__runs_claimed_ahead_count_against_the_concurrency_limit():
    start_workflows("fc_noop", range(10))
    worker = Worker(concurrency=3, queues=["fc"], poll_interval=0)
    worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)  # short runs: it claims ahead
    set_queue_limits("fc", concurrency=2)
    assert worker.dispatcher.next_run() is not None
    assert len(worker.dispatcher.waiting) == 1 and running("fc") == 2


def test_concurrency_share__the_limit_split_among_the_live_processes_serving_the_queue_by_their_threads():
    set_queue_limits("fc", concurrency=10)
    WorkflowWorkerFactory(queues=None, concurrency=4)
    WorkflowWorkerFactory(queues=["fc", "other"], concurrency=2)
    WorkflowWorkerFactory(queues=["other"], concurrency=8)
    WorkflowWorkerFactory(queues=None, concurrency=8, gone_at=timezone.now())
    assert rules.concurrency_share(["fc"], "this-worker", threads=4) == 4  # 10 x 4 of 4 + 4 + 2 threads
    assert rules.concurrency_share(["fc_free"], "this-worker", threads=4) is None


def test_dispatcher__claims_ahead_no_further_than_its_share_of_the_concurrency_limit():
    start_workflows("fc_noop", range(10))
    WorkflowWorkerFactory(queues=["fc"], concurrency=3)
    set_queue_limits("fc", concurrency=4)
    worker = Worker(concurrency=3, queues=["fc"], poll_interval=0)
    worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)  # short runs: it claims ahead
    assert worker.dispatcher.next_run() is not None
    assert len(worker.dispatcher.waiting) == 1 and running("fc") == 2, "its share, 4 x 3 of 6 threads"


def test_dispatcher__a_thread_asking_is_claimed_for_beyond_the_share():
    start_workflows("fc_noop", range(10))
    WorkflowWorkerFactory(queues=["fc"], concurrency=6)
    set_queue_limits("fc", concurrency=4)
    worker = Worker(concurrency=2, queues=["fc"], poll_interval=0)  # a share of 1
    worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)
    assert worker.dispatcher.next_run() is not None and not worker.dispatcher.waiting
    assert worker.dispatcher.next_run() is not None and running("fc") == 2


def test_dispatcher__serving_a_queue_without_a_limit_too__claims_ahead_there_beyond_the_share():
    set_queue_limits("fc", concurrency=2)  # a share of 2 for this lone 3-thread process
    start_workflows("fc_free", range(10))
    worker = Worker(concurrency=3, queues=["fc", "fc_free"], poll_interval=0)
    worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)  # short runs: it claims ahead
    assert worker.dispatcher.next_run() is not None
    assert len(worker.dispatcher.waiting) == 9, "all the others, as without the limit: beyond its share of 2"


def test_dispatcher__serving_a_queue_without_a_limit_too__takes_no_more_of_the_limited_one_than_its_share():
    start_workflows("fc_noop", range(10))
    WorkflowWorkerFactory(queues=["fc"], concurrency=3)
    set_queue_limits("fc", concurrency=4)
    worker = Worker(concurrency=3, queues=["fc", "fc_free"], poll_interval=0)
    worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)
    assert worker.dispatcher.next_run() is not None
    assert running("fc") == 2, "its share, 4 x 3 of 6 threads"


@pytest.mark.django_db(transaction=True)
def test_dispatcher__holding_its_whole_share__completes_a_finished_run_with_its_other_runs_in_one_claim(monkeypatch):
    monkeypatch.setattr(dispatch, "CLAIM_AHEAD_WHILE_RUNS_UNDER", 10.0)  # runs of a second count as short
    start_workflows("fc_noop", range(10))
    set_queue_limits("fc", concurrency=2)
    dispatcher = Worker(concurrency=2, queues=["fc"], poll_interval=0).dispatcher
    dispatcher.note_run(Outcome.COMPLETED, 1.0)
    runs: dict[str, Any] = {}
    finish = {name: threading.Event() for name in "ab"}

    def worker_thread(name: str) -> None:
        try:
            runs[name] = dispatcher.next_run()
            finish[name].wait(10)
            dispatcher.finish(claims.FinishedRun(runs[name], "null", time.monotonic()))
            runs[name + " next"] = dispatcher.next_run()
        finally:
            connections.close_all()

    threads = {name: threading.Thread(target=worker_thread, args=(name,)) for name in "ab"}
    for name, thread in threads.items():
        thread.start()
        assert wait_for(lambda name=name: name in runs, timeout=10, interval=0.01)
    finish["a"].set()
    time.sleep(0.3)
    ids = [runs["a"].id, runs["b"].id]
    assert running("fc") == 2 and not Workflow.objects.filter(pk__in=ids, status=WorkflowStatus.COMPLETED).exists()
    finish["b"].set()
    for thread in threads.values():
        thread.join(timeout=10)
    finished_at = set(Workflow.objects.filter(pk__in=ids, status=WorkflowStatus.COMPLETED).values_list("finished_at"))
    assert len(finished_at) == 1, "completed together, in one statement"
    assert runs["a next"] is not None and runs["b next"] is not None and running("fc") == 2


def test_rules__a_per_key_or_rate_limit_needs_the_full_limited_claim__a_concurrency_limit_or_a_pause_do_not():
    set_queue_limits("fc", concurrency=2)
    pause_queue("fc_free")
    assert rules.rules_of(None) == rules.Rules(limited=True, keys_or_rates=False)
    set_queue_limits("fc_keys", key_rate_limit="1/s")
    assert rules.rules_of(None) == rules.Rules(limited=True, keys_or_rates=True)
    assert rules.rules_of(["fc", "fc_free"]) == rules.Rules(limited=True, keys_or_rates=False)


# -- the admin and the command -----------------------------------------------------------


def test_queue_admin__lists_each_queue_with_its_limits_running_count_and_state(admin_client):
    start_workflows("fc_noop", range(4))
    set_queue_limits("fc", concurrency=3, rate_limit="100/m")
    pause_queue("fc_free")
    claim()
    html = admin_client.get(QUEUE_LIST_URL).content.decode()

    def row(name: str) -> str:
        url = reverse("admin:orchestration_workflowqueue_change", args=[quote(name)])
        return html.split(f'href="{url}"', 1)[1].split("</tr>", 1)[0]

    assert "orch-active" in row("fc") and ">3</a> / 3" in row("fc") and "3 / 100/m" in row("fc"), row("fc")
    assert "orch-paused" in row("fc_free") and "no limit" in row("fc_free"), row("fc_free")


def test_queue_admin__refuses_a_zero_limit_or_a_malformed_rate__saves_through_the_api(admin_client):
    url = reverse("admin:orchestration_workflowqueue_add")
    form = {"name": "fc", "concurrency": "0", "key_concurrency": "", "rate_limit": "lots", "key_rate_limit": ""}
    response = admin_client.post(url, form)
    assert response.status_code == 200 and not WorkflowQueue.objects.exists()
    errors = response.context["adminform"].form.errors
    assert "concurrency" in errors and "A rate limit is written N/s" in str(errors["rate_limit"])
    assert "empty: no limit" in str(errors["concurrency"]) and "None" not in str(errors["concurrency"])
    refused = admin_client.post(url, {**form, "name": "nowhere"}).context["adminform"].form.errors
    assert "queue row or run names it" in str(refused)
    admin_client.post(url, {**form, "concurrency": "2", "rate_limit": "5/s", "paused": "on"})
    row = WorkflowQueue.objects.get()
    assert (row.concurrency, row.rate_limit, row.paused, row.limits_from_settings) == (2, "5/s", True, False)
    change = reverse("admin:orchestration_workflowqueue_change", args=["fc"])
    admin_client.post(change, {"concurrency": "", "key_concurrency": "1", "rate_limit": "5/s", "key_rate_limit": ""})
    row.refresh_from_db()
    assert (row.concurrency, row.key_concurrency, row.paused) == (None, 1, False)


def test_queue_admin__deleting_a_queue_gives_it_back_the_settings_limits(admin_client):
    with override_settings(ORCHESTRATION={"QUEUES": {"fc": {"concurrency": 5}}}):
        set_queue_limits("fc", concurrency=1)
        admin_client.post(reverse("admin:orchestration_workflowqueue_delete", args=["fc"]), {"post": "yes"})
        row = WorkflowQueue.objects.get()
    assert (row.concurrency, row.limits_from_settings) == (5, True)


def test_queue_admin__pause_and_resume_actions_need_the_change_permission(client):
    set_queue_limits("fc", concurrency=1)
    client.force_login(staff_user("view_workflowqueue"))
    form = {"action": "pause_queues", "_selected_action": ["fc"], "index": 0}
    client.post(QUEUE_LIST_URL, form)
    assert not WorkflowQueue.objects.get(pk="fc").paused
    client.force_login(staff_user("view_workflowqueue", "change_workflowqueue", username="ops"))
    client.post(QUEUE_LIST_URL, form)
    assert WorkflowQueue.objects.get(pk="fc").paused
    client.post(QUEUE_LIST_URL, {**form, "action": "resume_queues"})
    assert not WorkflowQueue.objects.get(pk="fc").paused


def test_queue_admin__pause_and_resume_actions_leave_an_entry_in_the_queues_history(admin_client):
    set_queue_limits("fc", concurrency=1)
    form = {"action": "pause_queues", "_selected_action": ["fc"], "index": 0}
    admin_client.post(QUEUE_LIST_URL, form)
    admin_client.post(QUEUE_LIST_URL, {**form, "action": "resume_queues"})
    entries = LogEntry.objects.filter(object_id="fc").order_by("pk")
    assert [(entry.user.username, entry.action_flag, entry.get_change_message()) for entry in entries] == [
        ("admin", CHANGE, "Paused from the admin."),
        ("admin", CHANGE, "Resumed from the admin."),
    ]


def test_overview__shows_the_throttled_queues_and_why(admin_client):
    start_workflows("fc_noop", range(3))
    start_workflows("fc_keyed", [{"key": "a"}] * 2)
    set_queue_limits("fc", concurrency=1)
    set_queue_limits("fc_keys", key_concurrency=1)
    claim()
    pause_queue("fc_free")  # nothing due: not throttled
    html = admin_client.get(reverse("admin:orchestration_workflow_overview")).content.decode()
    panel = html.split('id="orch-throttled"', 1)[1].split("</section>", 1)[0]
    assert "at its concurrency limit (1 of 1 running)" in panel and "1 key(s) at their limit of 1" in panel, panel
    assert "fc_free" not in panel


def test_command__pauses_resumes_changes_limits_and_lists_the_queues(capsys):
    call_command("workflow_queues", "limits", "fc", "--concurrency", "4", "--rate-limit", "10/s")
    call_command("workflow_queues", "pause", "fc")
    assert "queue fc: paused; concurrency 4" in capsys.readouterr().out
    call_command("workflow_queues", "limits", "fc", "--rate-limit", "none")
    call_command("workflow_queues", "resume", "fc")
    call_command("workflow_queues", "list", "--json")
    (listed,) = [q for q in json.loads(capsys.readouterr().out.split("\n", 2)[2]) if q["name"] == "fc"]
    assert (listed["name"], listed["paused"], listed["concurrency"], listed["rate_limit"]) == ("fc", False, 4, None)
    call_command("workflow_queues", "list")
    assert "Queues" in capsys.readouterr().out
    with pytest.raises(CommandError, match="No queue 'nowhere'"):
        call_command("workflow_queues", "pause", "nowhere")
    with pytest.raises(CommandError, match="--concurrency must be a whole number of 1 or more, got 0"):
        call_command("workflow_queues", "limits", "fc", "--concurrency", "0")


# -- a queue that only runs name ---------------------------------------------------------


def test_pause_queue__of_a_queue_only_a_run_names__holds_its_runs_until_resumed():
    run = start_workflow("fc_free", queue="adhoc")  # no setting, type or row names "adhoc"
    assert pause_queue("adhoc").paused
    assert claim() == []
    resume_queue("adhoc")
    assert [claimed.id for claimed in claim()] == [run.pk]


def test_queue_admin__lists_a_queue_only_a_run_names__and_pauses_it(admin_client):
    start_workflow("fc_free", queue="adhoc")
    html = admin_client.get(QUEUE_LIST_URL).content.decode()
    assert reverse("admin:orchestration_workflowqueue_change", args=[quote("adhoc")]) in html
    admin_client.post(QUEUE_LIST_URL, {"action": "pause_queues", "_selected_action": ["adhoc"], "index": 0})
    assert WorkflowQueue.objects.get(pk="adhoc").paused
    assert claim() == []


def test_queue_admin__lists_the_queue_of_finished_runs_and_of_registered_workflows(admin_client):
    run = start_workflow("fc_free", queue="finished")
    Workflow.objects.filter(pk=run.pk).update(status="completed")
    html = admin_client.get(QUEUE_LIST_URL).content.decode()
    for name in ("finished", "fc", "default"):
        assert reverse("admin:orchestration_workflowqueue_change", args=[quote(name)]) in html, name


def test_queue_admin__shows_each_queues_pending_and_running_counts(admin_client):
    start_workflows("fc_noop", range(3))
    claim(limit=1)
    html = admin_client.get(QUEUE_LIST_URL).content.decode()
    url = reverse("admin:orchestration_workflowqueue_change", args=[quote("fc")])
    row = html.split(f'href="{url}"', 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'<td class="field-(pending_label|running_label)"><a [^>]*>(\d+)</a>', row) == [
        ("pending_label", "2"),
        ("running_label", "1"),
    ]


def test_sync_settings__as_a_worker_restart_runs_it__keeps_a_listed_queues_row(admin_client):
    start_workflow("fc_free", queue="adhoc")
    admin_client.get(QUEUE_LIST_URL)
    flow.sync_settings()
    assert WorkflowQueue.objects.filter(pk="adhoc").exists()
    assert "adhoc" in {state.name for state in flow.queue_states()}


def test_command__lists_the_same_queues_as_the_admin(admin_client, capsys):
    run = start_workflow("fc_free", queue="finished")
    Workflow.objects.filter(pk=run.pk).update(status="completed")
    call_command("workflow_queues", "list", "--json")
    listed = {queue["name"] for queue in json.loads(capsys.readouterr().out)}
    admin_client.get(QUEUE_LIST_URL)
    assert listed == set(WorkflowQueue.objects.values_list("name", flat=True)) and "finished" in listed


def test_command__lists_a_queue_only_a_run_names_and_pauses_it_by_name(capsys):
    start_workflow("fc_free", queue="adhoc")
    call_command("workflow_queues", "list", "--json")
    listed = json.loads(capsys.readouterr().out)
    assert [(q["name"], q["paused"], q["pending"], q["due"]) for q in listed if q["name"] == "adhoc"] == [
        ("adhoc", False, 1, 1)
    ]
    call_command("workflows", "pause", "adhoc")
    assert "queue adhoc: paused" in capsys.readouterr().out
    assert claim() == []

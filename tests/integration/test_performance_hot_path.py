"""The fast hot path keeps every guarantee: one statement a claim for several
workflows, the step's checkpoint written with the run's next write, few round
trips, and a claim plan that stays an index scan."""

from __future__ import annotations

import datetime
import importlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import orchestration.migrations
from orchestration import recovery, set_queue_limits, start_workflow, start_workflows, workflow
from orchestration.claim import claims, functions, statements, wire
from orchestration.claim.lease import Lease
from orchestration.errors import RunCancelled
from orchestration.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from orchestration.worker import Worker, execute
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import as_migrate_left_them, drain, other_connection

pytestmark = [pytest.mark.django_db, pytest.mark.serial]  # query plans: see the serial marker

BODIES: list[str] = []


def body(label: str) -> str:
    BODIES.append(label)
    return label


@workflow("perf_fails_between_steps", max_retries=1)
def fails_between_steps(ctx: Any, data: Any) -> str:
    ctx.step("first", body, "first")
    if ctx.attempt == 1:
        raise RuntimeError("outside any step")
    return ctx.step("second", body, "second")


@workflow("perf_two_steps")
def two_steps(ctx: Any, data: Any) -> str:
    ctx.step("first", body, "first")
    return ctx.step("second", body, "second")


@workflow("perf_one_step")
def one_step(ctx: Any, data: Any) -> str:
    return ctx.step("only", body, "only")


@pytest.fixture(autouse=True)
def _bodies() -> None:
    BODIES.clear()


def steps_of(workflow_id: Any) -> dict[int, str]:
    return dict(WorkflowStep.objects.filter(workflow_id=workflow_id).values_list("step_number", "status"))


def test_claim__takes_several_workflows_in_one_query_each_with_its_own_lease():
    start_workflows("perf_one_step", [1, 2, 3])
    with CaptureQueriesContext(connection) as queries:
        # As a worker claims: it reads its queues' rules once a poll interval, not once a claim.
        runs = claims.claim("w", None, limit=3, limited=False)
    assert len(queries) == 1
    assert len({run.lease_token for run in runs}) == 3
    rows = Workflow.objects.filter(pk__in=[run.id for run in runs])
    assert {(row.status, row.lease_token, row.attempts, row.worker_id) for row in rows} == {
        (WorkflowStatus.RUNNING, run.lease_token, 1, "w") for run in runs
    }


def test_claim__of_a_workflow_never_run__reads_no_steps_and_one_with_steps_reads_them():
    new = start_workflow("perf_one_step")
    recorded = WorkflowFactory(workflow_type="perf_two_steps")
    WorkflowStepFactory(workflow=recorded, step_number=1, step_name="first", output_data="stored")
    runs = {run.id: run for run in claims.claim("w", None, limit=2)}
    assert runs[new.pk].fresh and not runs[recorded.pk].fresh
    with CaptureQueriesContext(connection) as queries:
        assert runs[new.pk].recorded_steps() == {}
    assert len(queries) == 0
    assert runs[recorded.pk].recorded_steps()[1].output == "stored"


def test_one_step_workflow__runs_in_one_statement_after_its_claim():
    workflow_ = start_workflow("perf_one_step")
    (run,) = claims.claim("w", None)
    assert steps_of(workflow_.pk) == {1: StepStatus.RUNNING}  # recorded running by the claim
    with CaptureQueriesContext(connection) as queries:
        assert execute(run) == "completed"
    # the step's checkpoint (with its name) and the workflow's completion
    assert len(queries) == 1
    step = WorkflowStep.objects.get(workflow_id=workflow_.pk)
    assert (step.step_name, step.status, step.attempts) == ("only", StepStatus.COMPLETED, 1)


def test_step_checkpoint__is_written_with_the_next_step_start_in_one_statement():
    workflow_ = start_workflow("perf_two_steps")
    (run,) = claims.claim("w", None)
    run.start_step(1, "first")
    run.defer_checkpoint(1, "one", json.dumps({"out": 1}))
    assert steps_of(workflow_.pk) == {1: StepStatus.RUNNING}  # not written yet
    with CaptureQueriesContext(connection) as queries:
        run.start_step(2, "second")
    assert len(queries) == 1
    assert steps_of(workflow_.pk) == {1: StepStatus.COMPLETED, 2: StepStatus.RUNNING}
    first = WorkflowStep.objects.get(workflow_id=workflow_.pk, step_number=1)
    assert first.output_data == {"out": 1} and first.completed_at >= first.started_at
    workflow_.refresh_from_db()
    assert workflow_.current_step == 1


def test_step_checkpoint__survives_a_failure_outside_any_step__and_the_step_does_not_run_again():
    workflow_ = start_workflow("perf_fails_between_steps")
    assert drain() == ["retrying", "completed"]
    assert BODIES == ["first", "second"]
    assert steps_of(workflow_.pk) == {1: StepStatus.COMPLETED, 2: StepStatus.COMPLETED}


def test_step_checkpoint__is_written_when_the_run_is_released_for_shutdown():
    workflow_ = start_workflow("perf_two_steps")
    (run,) = claims.claim("w", None)
    released: list[bool] = []

    def should_release() -> bool:  # let step 1 run, then ask to release at step 2's boundary
        released.append(True)
        return len(released) > 1

    assert execute(run, should_release=should_release) == "released"
    assert steps_of(workflow_.pk) == {1: StepStatus.COMPLETED}
    workflow_.refresh_from_db()
    assert (workflow_.status, workflow_.current_step, workflow_.attempts) == (WorkflowStatus.PENDING, 1, 0)
    assert drain() == ["completed"]
    assert BODIES == ["first", "second"]


def test_step_checkpoint__of_a_run_that_lost_its_lease__is_never_written():
    from orchestration import cancel_workflow

    workflow_ = start_workflow("perf_two_steps")
    (run,) = claims.claim("w", None)
    run.start_step(1, "first")
    run.defer_checkpoint(1, "one", json.dumps("late"))
    cancel_workflow(workflow_.pk)
    with pytest.raises(RunCancelled):
        run.start_step(2, "second")
    with pytest.raises(RunCancelled):
        run.complete(None)
    step = WorkflowStep.objects.get(workflow_id=workflow_.pk, step_number=1)
    assert (step.status, step.output_data) == (StepStatus.FAILED, None)


def test_unstarted_runs__of_a_stopping_worker_go_back_without_spending_an_attempt():
    start_workflows("perf_one_step", [1, 2])
    worker = Worker(concurrency=2)
    runs = claims.claim(worker.worker_id, None, limit=2)
    worker.dispatcher.offer(runs)
    worker.dispatcher.release_waiting()
    assert set(Workflow.objects.values_list("status", "attempts", "lease_token")) == {(WorkflowStatus.PENDING, 0, None)}


def _worker_with_one_run_waiting_and_one_finished() -> tuple[Worker, Lease, Lease]:
    start_workflows("perf_one_step", [1, 2])
    worker = Worker(concurrency=3)
    waiting, finished = claims.claim(worker.worker_id, None, limit=2)
    worker.dispatcher.offer([waiting])
    worker.dispatcher.finish(claims.FinishedRun(finished, '"done"', 0.0))
    return worker, waiting, finished


@pytest.mark.django_db(transaction=True)  # the claimer in flight is another thread, on its own connection
def test_next_run__takes_a_run_claimed_for_it_without_waiting_for_the_claim_in_flight():
    worker, waiting, finished = _worker_with_one_run_waiting_and_one_finished()
    with other_connection(autocommit=False) as other:
        # Another thread's round trip, which writes the finished run, waits on this lock.
        other.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", [finished.id])
        claimer = threading.Thread(target=lambda: (worker.dispatcher.next_run(), connections.close_all()))
        claimer.start()
        while worker.dispatcher.awaiting_completion:  # until the claimer has taken it
            time.sleep(0.01)
        with CaptureQueriesContext(connection) as queries:
            assert worker.dispatcher.next_run() is waiting
        assert not queries.captured_queries and claimer.is_alive()  # left to the claimer in flight
        assert Workflow.objects.get(pk=finished.id).status == WorkflowStatus.RUNNING
        other.rollback()
    claimer.join(timeout=10)
    assert Workflow.objects.get(pk=finished.id).status == WorkflowStatus.COMPLETED


def test_next_run__with_no_claim_in_flight__a_finished_run_is_written_before_a_waiting_run_is_taken():
    worker, waiting, finished = _worker_with_one_run_waiting_and_one_finished()
    assert worker.dispatcher.next_run() is waiting
    assert (
        Workflow.objects.get(pk=finished.id).status == WorkflowStatus.COMPLETED
        and not worker.dispatcher.awaiting_completion
    )


def test_next_run__after_a_claim_found_nothing__a_finished_run_is_still_written_before_idling():
    start_workflows("perf_one_step", [1])
    worker = Worker(concurrency=2)
    (finished,) = claims.claim(worker.worker_id, None, limit=1)
    worker.dispatcher.finish(claims.FinishedRun(finished, '"done"', 0.0))
    assert worker.dispatcher.next_run() is None
    assert (
        Workflow.objects.get(pk=finished.id).status == WorkflowStatus.COMPLETED
        and not worker.dispatcher.awaiting_completion
    )


def test_claim_plan__is_an_index_scan_that_stops_early__with_a_deep_backlog_and_stale_statistics():
    # The statistics are those migrate left (an empty table); 10,000 rows arrive since.
    as_migrate_left_them()
    start_workflows("perf_one_step", range(10_000))
    statement, params = claims.claim_statement("w", None, [], 4)
    with connection.cursor() as cursor:
        cursor.execute(statements.INDEX_PLANS_ONLY)  # as the claim's function sets them, for this transaction
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using idx_workflows_due" in plan, plan
    # The one sort is of the two ranges' first runs (due, and whose wait has passed), never of the backlog.
    assert [int(rows) for rows in re.findall(r"Sort \(actual time=\S+ rows=(\d+)", plan)] == [4], plan
    assert "Bitmap" not in plan, plan


#: The claim as its function runs it (``functions.CLAIM_BODY``): its limit a parameter.
CLAIM_WITH_ITS_LIMIT_BOUND = statements.COMPLETE_AND_CLAIM.replace("{limit}", "%(limit)s::integer")


def _plan(statement: str, params: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + statement, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _stale_statistics_with_a_half_drained_backlog() -> list[Lease]:
    """Statistics of an empty table, then 6,000 queued and 3,000 claimed: the
    planner, left alone, reads every queued row per claim (see statements.INDEX_PLANS_ONLY)."""
    as_migrate_left_them()
    start_workflows("perf_one_step", range(6_000))
    return claims.claim("w", None, limit=3_000)


def test_hot_path_plans__with_index_plans_only__stay_index_lookups_with_stale_statistics():
    runs = _stale_statistics_with_a_half_drained_backlog()
    with connection.cursor() as cursor:
        cursor.execute(statements.INDEX_PLANS_ONLY)  # as the functions' SET clauses do
    claim_plan = _plan(*claims.claim_statement("w", None, [], 4))
    assert "Index Scan using idx_workflows_due" in claim_plan, claim_plan
    finished = [claims.FinishedRun(run, "null", 0.0) for run in runs[:4]]
    for item in finished:
        item.run.defer_checkpoint(1, "only", json.dumps(None))
    complete_plan = _plan(*claims.claim_statement("w", None, finished, 0))
    together_plan = _plan(*claims.claim_statement("w", None, finished, 4))
    assert "Index Scan using idx_workflows_due" in together_plan, together_plan
    for plan in (claim_plan, complete_plan, together_plan):
        assert not any(shape in plan for shape in ("Bitmap", "Seq Scan", "idx_workflows_running")), plan
        # The claim's one sort: of the first runs of its two ranges (due, and whose wait has passed).
        assert plan.count("Sort Key") == plan.count("Sort Key: due.priority DESC, due.created_at"), plan


def test_claim_generic_plan__reads_the_steps_of_the_claimed_runs_only__with_many_steps_recorded():
    # The workers run the claim's prepared generic plan, where the limit is a parameter.
    started = start_workflows("perf_one_step", range(500))
    WorkflowStep.objects.bulk_create(
        WorkflowStep(workflow_id=workflow.pk, step_number=number, step_name="done", status=StepStatus.COMPLETED)
        for workflow in started
        for number in (2, 3, 4)
    )
    pg = connection.connection
    pg.execute("ANALYZE workflows, workflow_steps")
    pg.execute(statements.INDEX_PLANS_ONLY)
    # A claim as large as a whole process's threads and more: claiming ahead makes them.
    params = {**claims.claim_params("w", None, []), "limit": 400}
    psycopg.Cursor(pg).execute(CLAIM_WITH_ITS_LIMIT_BOUND, params, prepare=True)
    name, types = pg.execute(
        "SELECT name, parameter_types FROM pg_prepared_statements WHERE cardinality(parameter_types) > 0 "
        "ORDER BY prepare_time DESC LIMIT 1"  # the claim's, not start_workflows' INSERT before it
    ).fetchone()
    arguments = {"uuid[]": "'{}'", "jsonb": "'[]'", "integer[]": "'{}'", "double precision[]": "'{}'", "text[]": "NULL",
                 "smallint": "400", "integer": "400"}  # fmt: skip
    values = ", ".join(arguments.get(kind, "'w'") for kind in types)
    plan = "\n".join(row[0] for row in pg.execute(f"EXPLAIN (ANALYZE, COSTS OFF) EXECUTE {name}({values})"))
    assert "idx_workflow_steps_lookup" in plan, plan
    assert not any(f"rows={n}" in plan for n in (1000, 1500)), plan  # no read of every step row


def test_claim_generic_plan__with_stale_statistics__reads_each_table_by_an_index_condition():
    # The function's plan: its limit bound, planned once, under its planner settings, while the
    # statistics still say the tables are empty; a completion with a checkpoint runs every part.
    runs = _stale_statistics_with_a_half_drained_backlog()
    for run in runs[:4]:
        run.defer_checkpoint(1, "only", json.dumps(None))
    finished = [claims.FinishedRun(run, "null", 0.0) for run in runs[:4]]
    pg = connection.connection
    pg.execute(statements.INDEX_PLANS_ONLY)
    plan = _plan(CLAIM_WITH_ITS_LIMIT_BOUND, {**claims.claim_params("w", None, finished), "limit": 4})
    scans = plan.split("->")
    unbounded = [scan for scan in scans if " Scan using " in scan and "Index Cond" not in scan.split("->")[0]]
    assert not [scan for scan in unbounded if "idx_workflows_due" not in scan], plan  # the claim's own is ordered


def without_setting(*names: str) -> str:
    """``statements.INDEX_PLANS_ONLY_NO_JIT`` with settings ``names`` left out."""
    kept = re.findall(r"set_config\('(\w+)', '(\w+)', true\)", statements.INDEX_PLANS_ONLY_NO_JIT)
    return "SELECT " + ", ".join(
        f"set_config('{setting}', '{value}', true)" for setting, value in kept if setting not in names
    )


@pytest.mark.parametrize(
    "setting, limited, completed, shape",
    [
        ("enable_bitmapscan", False, 32, "Bitmap"),
        ("enable_hashjoin", False, 4, "Hash Join"),
        # A merge join over sorts: enable_sort prices its sorts out too.
        (("enable_mergejoin", "enable_sort"), True, 4, "Merge Join"),
    ],
)
def test_index_plans_only__each_setting_left_out__lets_in_the_plan_it_prevents(setting, limited, completed, shape):
    # Statistics of a table of finished runs, analysed; the backlog, and the runs completed here, came since.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, status, created_at) "
            "SELECT 'perf_one_step', 'completed', now() - interval '1 day' FROM generate_series(1, 30000)"
        )
        cursor.execute("ANALYZE workflows, workflow_steps")
    start_workflows("perf_one_step", range(6_000))
    if limited:
        set_queue_limits("default", concurrency=10_000)
    finished = [claims.FinishedRun(run, "null", 0.0) for run in claims.claim("w", None, limit=2_000)[:completed]]
    statement = claims.claim_statement("w", None, finished, 4, limited=limited)

    def plan(settings: str) -> str:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(settings)
            return _plan(*statement)

    assert shape in plan(without_setting(*([setting] if isinstance(setting, str) else setting)))
    assert shape not in plan(statements.INDEX_PLANS_ONLY_NO_JIT)


@pytest.mark.parametrize("name", sorted(functions.FUNCTIONS))
def test_hot_path_functions__in_the_database__are_those_of_orchestration_functions(name):
    """A change to ``orchestration.claim.functions`` (or to a statement a function is made
    of) needs a migration that creates the functions again, or the workers run the old body."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [name])
        (body,) = cursor.fetchone()
    assert body == functions.FUNCTIONS[name][1]


def test_hot_path_functions__changed__come_with_a_migration_that_creates_them_again():
    migrations = sorted(path.stem for path in Path(orchestration.migrations.__file__).parent.glob("0*.py"))
    recorded = [
        module.FUNCTIONS_FINGERPRINT
        for module in (importlib.import_module(f"orchestration.migrations.{name}") for name in migrations)
        if hasattr(module, "FUNCTIONS_FINGERPRINT")
    ]
    assert recorded[-1] == functions.fingerprint(), "add a migration that runs functions.create_functions()"


def test_finish_and_claim__completes_finished_runs_with_their_checkpoints_and_claims_in_one_transaction():
    start_workflows("perf_one_step", [1, 2])
    waiting = start_workflow("perf_one_step", priority=-1)  # claimed after the other two
    runs = claims.claim("w", None, limit=2)
    for run in runs:
        run.defer_checkpoint(1, "only", json.dumps({"n": str(run.id)}))
    done, lost = (Workflow.objects.get(pk=run.id) for run in runs)
    Workflow.objects.filter(pk=lost.pk).update(lease_token=None)  # reclaimed meanwhile
    finished = [claims.FinishedRun(run, '{"ok": true}', 0.0) for run in runs]
    claimed, completed = claims.finish_and_claim("w", None, finished, 2)
    assert completed == {done.pk}
    assert [run.id for run in claimed] == [waiting.pk]
    done.refresh_from_db()
    assert (done.status, done.output_data, done.current_step) == (WorkflowStatus.COMPLETED, {"ok": True}, 1)
    step = WorkflowStep.objects.get(workflow_id=done.pk)
    assert (step.step_name, step.status, step.output_data) == ("only", StepStatus.COMPLETED, {"n": str(done.pk)})
    assert steps_of(lost.pk) == {1: StepStatus.RUNNING}  # nothing of the lost run was written


@workflow("perf_no_steps")
def no_steps(ctx: Any, data: Any) -> str:
    if data == "fail":
        raise RuntimeError("before any step")
    return "nothing to checkpoint"


def test_claim_record_of_step_1__is_deleted_when_the_run_completes_without_calling_a_step():
    workflow_ = start_workflow("perf_no_steps")
    assert drain() == ["completed"]
    assert steps_of(workflow_.pk) == {}


def test_claim_record_of_step_1__is_deleted_when_the_run_fails_before_calling_a_step():
    workflow_ = start_workflow("perf_no_steps", "fail", max_retries=0)
    assert drain() == ["failed"]
    assert steps_of(workflow_.pk) == {}


def test_claim_record_of_step_1__failed_unnamed_by_a_lost_worker__is_named_by_the_next_attempt():
    workflow_ = start_workflow("perf_one_step")
    (run,) = claims.claim("dead-worker", None)
    Workflow.objects.filter(pk=run.id).update(updated_at=run_after_minutes_ago(10))
    recovery.reclaim_stuck(stuck_after=60)
    step = WorkflowStep.objects.get(workflow_id=workflow_.pk)
    assert (step.step_name, step.status) == (None, StepStatus.FAILED)
    assert drain() == ["completed"]
    step.refresh_from_db()
    assert (step.step_name, step.status, step.attempts) == ("only", StepStatus.COMPLETED, 2)


def run_after_minutes_ago(minutes: int) -> datetime.datetime:
    return timezone.now() - datetime.timedelta(minutes=minutes)


@pytest.mark.django_db(transaction=True)  # autocommit, as a worker runs: the batch's transaction rolls back alone
@override_settings(ORCHESTRATION={"RETRY_BACKOFF": 3600, "RETRY_BACKOFF_MAX": 3600})  # the retry is not due at once
def test_completions_written_together__one_the_database_refuses_fails_alone_and_the_others_complete():
    start_workflows("perf_one_step", [1, 2])
    worker = Worker(concurrency=2)
    good, bad = claims.claim(worker.worker_id, None, limit=2)
    worker.dispatcher.finish(claims.FinishedRun(good, '"fine"', 0.0))
    worker.dispatcher.finish(
        claims.FinishedRun(bad, '"\\u0000"', 0.0)
    )  # jsonb refuses NUL; validation normally stops it first
    assert worker.dispatcher.next_run() is None
    assert Workflow.objects.get(pk=good.id).status == WorkflowStatus.COMPLETED
    refused = Workflow.objects.get(pk=bad.id)
    assert refused.status == WorkflowStatus.PENDING and "Unicode" in refused.error_message  # retried later
    assert worker.completed == 1 and not worker.dispatcher.awaiting_completion


@pytest.mark.django_db(transaction=True)
def test_run__after_its_connection_was_closed__runs_on_the_new_one():
    (before,) = wire.run(connection.alias, "SELECT pg_backend_pid()", None)
    connection.close()
    (after,) = wire.run(connection.alias, "SELECT pg_backend_pid()", None)
    assert after != before

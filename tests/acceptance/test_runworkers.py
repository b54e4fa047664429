"""Real ``runworkers`` processes against the test database."""

from __future__ import annotations

import datetime
import signal
import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count
from django.utils import timezone

from orchestration import start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStep
from tests.support import run_burst, start_workers
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def stopped_during_its_first_step(workflow, workers, *args: str) -> str:
    """A ``runworkers`` process sent SIGTERM once ``workflow``'s first step body
    runs; returns its output, having checked it exited cleanly."""
    process = start_workers("--concurrency", "1", *args)
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    workflow.refresh_from_db()
    return output


def test_three_worker_processes_run_300_workflows_each_step_body_exactly_once(workers):
    ids = {start_workflow("three_steps", {"n": n}).pk for n in range(300)}
    for _ in range(3):
        workers.append(start_workers("--concurrency", "4", "--burst"))
    for process in workers:
        output, _ = process.communicate(timeout=180)
        assert process.returncode == 0, output
    assert Workflow.objects.filter(pk__in=ids, status="completed").count() == 300
    runs_per_step = StepRun.objects.values("workflow_id", "step_number").annotate(n=Count("id"))
    assert len(runs_per_step) == 900 and {row["n"] for row in runs_per_step} == {1}
    rows_per_step = WorkflowStep.objects.values("workflow_id", "step_number").annotate(n=Count("id"))
    assert len(rows_per_step) == 900 and {row["n"] for row in rows_per_step} == {1}
    assert len(set(StepRun.objects.values_list("pid", flat=True))) >= 2, "the work was not shared"


def test_row_inserted_by_plain_sql_is_run_by_a_worker():
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('echo', '\"from sql\"') RETURNING id")
        workflow_id = cursor.fetchone()[0]
    result = run_burst()
    assert result.returncode == 0, result.stdout + result.stderr
    workflow = Workflow.objects.get(pk=workflow_id)
    assert (workflow.status, workflow.output_data) == ("completed", "from sql")


def test_burst__exits_leaving_work_due_later_pending():
    later = start_workflow("echo", 1, run_after=timezone.now() + datetime.timedelta(hours=1))
    now = start_workflow("echo", 2)
    result = run_burst()
    assert result.returncode == 0, result.stdout + result.stderr
    assert Workflow.objects.get(pk=now.pk).status == "completed"
    assert Workflow.objects.get(pk=later.pk).status == "pending"


def test_burst__logs_a_line_per_workflow_with_its_duration():
    workflow = start_workflow("three_steps")
    result = run_burst()
    log = result.stdout + result.stderr
    assert f"workflow {workflow.pk} (three_steps) completed in" in log
    assert "completed in" not in log.replace(f"workflow {workflow.pk} (three_steps) completed in", "")


def test_burst__log_level_debug__logs_a_line_per_step_with_its_duration():
    workflow = start_workflow("three_steps")
    result = run_burst("--log-level", "DEBUG")
    log = result.stdout + result.stderr
    assert f'workflow {workflow.pk} (three_steps) step 2 "second" completed in' in log


def test_queues_option__serves_only_those_queues():
    default = start_workflow("echo", 1)
    other = start_workflow("on_other_queue", 2)
    result = run_burst("--queues", "other")
    assert result.returncode == 0, result.stdout + result.stderr
    assert Workflow.objects.get(pk=other.pk).status == "completed"
    assert Workflow.objects.get(pk=default.pk).status == "pending"


def test_invalid_options__exit_with_a_clear_error():
    result = run_burst("--concurrency", "0")
    assert result.returncode != 0 and "--concurrency" in result.stderr
    result = run_burst("--queues", "a,,b")
    assert result.returncode != 0 and "queue name" in result.stderr
    result = run_burst("--queues", "default,deafult")
    assert result.returncode != 0 and "No queue 'deafult'" in result.stderr


def test_queues_option__serves_a_queue_only_a_run_names():
    run = start_workflow("echo", {"n": 1}, queue="adhoc")  # no setting, type or row names "adhoc"
    result = run_burst("--queues", "adhoc")
    assert result.returncode == 0, result.stderr
    assert Workflow.objects.get(pk=run.pk).status == "completed"


def test_idle_worker_is_woken_by_notify_not_by_polling(workers):
    process = start_workers("--poll-interval", "60", "--concurrency", "1")
    workers.append(process)
    time.sleep(2.0)  # the worker is up, listening, and has polled once
    workflow = start_workflow("echo", "wake up")
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=20)


def test_workflow_started_in_a_transaction_is_invisible_to_workers_until_commit(workers):
    process = start_workers("--poll-interval", "0.1", "--concurrency", "1")
    workers.append(process)
    with transaction.atomic():
        workflow = start_workflow("echo", "after commit")
        time.sleep(1.5)
        assert Workflow.objects.get(pk=workflow.pk).status == "pending"
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=20)


def test_claim_skips_a_row_locked_by_another_connection():

    locked = start_workflow("echo", "locked")
    free = start_workflow("echo", "free")
    holding, release = threading.Event(), threading.Event()

    def hold_lock():
        with transaction.atomic():
            list(Workflow.objects.select_for_update().filter(pk=locked.pk))
            holding.set()
            release.wait(10)
        connections.close_all()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert holding.wait(10)
        claimed = claims.claim("w", None, limit=10)
        assert [run.id for run in claimed] == [free.pk]
    finally:
        release.set()
        holder.join()


def test_sigterm__finishes_the_running_step_then_releases_without_spending_an_attempt(workers):
    workflow = start_workflow("slow", {"seconds": 1.5, "steps": 3})
    output = stopped_during_its_first_step(workflow, workers, "--poll-interval", "0.1")
    assert (workflow.status, workflow.attempts, workflow.lease_token) == ("pending", 0, None)
    steps = WorkflowStep.objects.filter(workflow=workflow).order_by("step_number")
    assert [step.status for step in steps] == ["completed"], "the running step finished, no new one started"
    assert "released to pending" in output


def test_second_signal__releases_at_once_mid_step(workers):
    workflow = start_workflow("slow", {"seconds": 20, "steps": 1})
    process = start_workers("--concurrency", "1", "--poll-interval", "0.1")
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert time.monotonic() - started < 15, "did not wait for the 20 s step"
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts) == ("pending", 0)
    step = WorkflowStep.objects.get(workflow=workflow)
    assert step.status == "failed" and "released" in step.error_message

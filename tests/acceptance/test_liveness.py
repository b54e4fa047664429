"""Heartbeats, stuck recovery, fencing against zombies, cancellation, crashes and
dropped connections, with real ``runworkers`` processes."""

from __future__ import annotations

import re
import signal
import time

import pytest
from django.db import connection

from orchestration import cancel_workflow, start_workflow
from orchestration.models import Workflow, WorkflowStep, WorkflowWorker
from tests.acceptance.test_runworkers import wait_for
from tests.support import other_connection, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

FAST_LIVENESS = dict(ORCHESTRATION_STUCK_AFTER="2", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")


def snapshot(workflow_id):
    row = Workflow.objects.filter(pk=workflow_id).values().get()
    steps = list(WorkflowStep.objects.filter(workflow_id=workflow_id).order_by("step_number").values())
    return row, steps


def test_heartbeat__keeps_a_step_longer_than_stuck_after_from_being_reclaimed(workers):
    workflow = start_workflow("slow", {"seconds": 4, "steps": 1})
    env = worker_env(**FAST_LIVENESS)
    workers.extend(start_workers("--concurrency", "1", env=env) for _ in range(2))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=30)
    workflow.refresh_from_db()
    assert workflow.attempts == 1
    assert StepRun.objects.filter(workflow_id=workflow.pk).count() == 1


def test_worker_id__names_host_pid_and_a_random_nonce(workers):
    workflow = start_workflow("echo", 1)
    process = start_workers("--concurrency", "1")
    workers.append(process)
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed")
    worker_id = Workflow.objects.get(pk=workflow.pk).worker_id
    assert re.fullmatch(rf"[^:]+:{process.pid}:[0-9a-f]{{8}}", worker_id)


def test_zombie__a_paused_worker_whose_workflow_finished_elsewhere_writes_nothing(workers):
    workflow = start_workflow("slow", {"seconds": 1.5, "steps": 2})
    env = worker_env(**FAST_LIVENESS)
    zombie = start_workers("--concurrency", "1", env=env)
    workers.append(zombie)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    zombie.send_signal(signal.SIGSTOP)
    try:
        workers.append(start_workers("--concurrency", "1", env=env))
        # The paused zombie is the watcher: the other sweeps once three of its alive notices (a sweep apart) go unheard.
        assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=20)
        finished = snapshot(workflow.pk)
        assert finished[0]["attempts"] == 2 and finished[0]["worker_id"] != ""
    finally:
        zombie.send_signal(signal.SIGCONT)
    # The zombie wakes, finishes its step body, and its attempt ends at the refused checkpoint.
    woke = wait_for(lambda: f"{workflow.pk} (slow) stopped" in zombie.log_path.read_text(errors="replace"))
    assert woke, zombie.log_path.read_text()
    assert snapshot(workflow.pk) == finished
    zombie.send_signal(signal.SIGTERM)
    output, _ = zombie.communicate(timeout=30)
    assert zombie.returncode == 0, output
    assert "lease lost" in output or "no longer held" in output


def test_cancel__a_running_workflow_stops_and_runs_no_further_step(workers):
    workflow = start_workflow("slow", {"seconds": 1.5, "steps": 4})
    process = start_workers("--concurrency", "1", env=worker_env(**FAST_LIVENESS))
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    cancel_workflow(workflow)
    # The running step's body finishes, and the attempt ends there.
    ended = wait_for(lambda: f"{workflow.pk} (slow) stopped" in process.log_path.read_text(errors="replace"))
    assert ended, process.log_path.read_text()
    assert Workflow.objects.get(pk=workflow.pk).status == "cancelled"
    assert StepRun.objects.filter(workflow_id=workflow.pk).count() == 1
    assert not WorkflowStep.objects.filter(workflow=workflow, status="completed").exists()
    assert process.poll() is None, "the worker carries on"


def test_crash_loop__a_step_that_kills_its_process_is_quarantined_and_the_rest_complete(workers):
    crasher = start_workflow("crashes_worker")
    others = [start_workflow("three_steps", {"n": n}) for n in range(5)]
    env = worker_env(**FAST_LIVENESS, ORCHESTRATION_MAX_WORKER_DEATHS="2")
    deaths = 0
    deadline = time.monotonic() + 90
    process = None
    while time.monotonic() < deadline:
        if process is None or process.poll() is not None:  # a supervisor restarting the dead worker
            if process is not None:
                deaths += 1
            process = start_workers("--concurrency", "1", env=env)
            workers.append(process)
        finished = Workflow.objects.filter(status__in=["completed", "failed"]).count()
        if finished == len(others) + 1:
            break
        time.sleep(0.2)
    crasher.refresh_from_db()
    assert crasher.status == "failed" and crasher.error_message.startswith("Quarantined")
    assert "2 times in a row during step 2" in crasher.error_message
    assert deaths == 2
    assert StepRun.objects.filter(workflow_id=crasher.pk, step_number=1).count() == 1
    assert Workflow.objects.filter(pk__in=[w.pk for w in others], status="completed").count() == 5


def test_dropped_connections__workers_reconnect_and_nothing_is_lost(workers):
    ids = [start_workflow("three_steps", {"sleep": 0.1}).pk for _ in range(20)]
    process = start_workers("--concurrency", "2", env=worker_env(**FAST_LIVENESS))
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.count() >= 6)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 2
    assert wait_for(lambda: Workflow.objects.filter(pk__in=ids, status="completed").count() == 20, timeout=60)
    assert process.poll() is None, "the worker survived"
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "is unavailable" in output or "failed" in output
    assert not Workflow.objects.filter(status="running").exists()


def test_heartbeat__goes_on_while_another_transaction_locks_one_of_its_runs(workers):
    locked, other = (start_workflow("slow", {"seconds": 4, "steps": 1}) for _ in range(2))
    env = worker_env(ORCHESTRATION_HEARTBEAT_INTERVAL="0.3", ORCHESTRATION_STUCK_AFTER="30")
    process = start_workers("--concurrency", "2", env=env)
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id__in=[locked.pk, other.pk]).count() == 2, timeout=30)

    def beats() -> tuple[object, object]:
        return Workflow.objects.get(pk=other.pk).updated_at, WorkflowWorker.objects.get().last_seen_at

    with other_connection(autocommit=False) as caller:  # a caller's long transaction, as send_event's lock
        caller.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", [locked.pk])
        before = beats()
        time.sleep(1.5)
        after = beats()
        caller.rollback()

    assert after[0] > before[0], "the other run's heartbeat waited behind the lock"
    assert after[1] > before[1], "the worker's own row waited behind the lock"
    assert wait_for(lambda: Workflow.objects.filter(status="completed").count() == 2, timeout=30)
    assert [w.attempts for w in Workflow.objects.all()] == [1, 1]

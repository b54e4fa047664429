"""Waiting primitives with real ``runworkers`` processes: nothing holds a worker
while it waits, and every wait survives restarts."""

from __future__ import annotations

import datetime
import itertools
import signal
import tempfile
from pathlib import Path

import pytest
from django.utils import timezone

from orchestration import send_event, start_workflow
from orchestration.models import Workflow, WorkflowStep, WorkflowWorker
from tests.acceptance.test_runworkers import wait_for
from tests.support import run_burst, run_manage, start_workers, worker_env
from tests.testapp.models import LedgerEntry

pytestmark = pytest.mark.django_db(transaction=True)


def stop(process) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return output


@pytest.mark.moments
def test_sleeping_workflow__survives_a_worker_restart_and_wakes_on_time(workers):
    workflow = start_workflow("sleeper", {"seconds": 4})
    first = start_workers("--concurrency", "1", "--poll-interval", "0.2")
    workers.append(first)
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).waiting_for is not None)
    stop(first)  # the workflow sleeps in the table, not in a process
    wake_at = Workflow.objects.get(pk=workflow.pk).run_after
    second = start_workers("--concurrency", "1", "--poll-interval", "0.2")
    workers.append(second)
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=30)
    resumed = WorkflowStep.objects.get(workflow=workflow, step_number=3).started_at
    # On a loaded machine the new process may come up after the wake-up time: it is due
    # from whichever is later, within the 0.2 s poll interval and a margin for the load.
    up_at = WorkflowWorker.objects.filter(pid=second.pid).latest("started_at").started_at
    due_at = max(wake_at, up_at)
    assert wake_at <= resumed <= due_at + datetime.timedelta(seconds=0.2 + 2.0), (resumed - wake_at, up_at - wake_at)


def test_waiting_workflows_hold_no_worker__500_sleepers_on_two_threads_all_finish(workers):
    Workflow.objects.bulk_create(Workflow(workflow_type="sleeper", input_data={"seconds": 2}) for _ in range(500))
    workers.append(start_workers("--concurrency", "2", "--poll-interval", "0.2"))
    assert wait_for(lambda: Workflow.objects.filter(status="completed").count() == 500, timeout=300, interval=0.5)
    assert not WorkflowStep.objects.exclude(status="completed").exists()


def test_event_sent_from_another_process__wakes_the_workflow_at_once(workers):
    workflow = start_workflow("awaits_approval")
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "30"))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).waiting_for == "event: approval")
    send_event(workflow.pk, "approval", {"by": "ops"})
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=10)
    assert Workflow.objects.get(pk=workflow.pk).output_data == {"decision": {"by": "ops"}}


def test_fan_out_of_100_children__fans_in_their_outputs_in_order(workers):
    parent = start_workflow("fan_out", {"children": 100})
    workers.extend(start_workers("--concurrency", "4", "--poll-interval", "0.2") for _ in range(2))
    assert wait_for(lambda: Workflow.objects.get(pk=parent.pk).status == "completed", timeout=120, interval=0.3)
    assert Workflow.objects.get(pk=parent.pk).output_data == [n * n for n in range(100)]
    assert Workflow.objects.filter(parent=parent, status="completed").count() == 100


def test_schedule__two_worker_processes_start_exactly_one_run_per_tick(workers):
    env = worker_env(ORCHESTRATION_SCHEDULER="1")
    workers.extend(start_workers("--concurrency", "2", env=env) for _ in range(2))
    runs = Workflow.objects.filter(workflow_type="scheduled_tick")
    assert wait_for(lambda: runs.count() >= 4, timeout=40, interval=0.2)
    for process in workers:
        stop(process)
    inputs = runs.values_list("input_data", flat=True)
    ticks = sorted(datetime.datetime.fromisoformat(data["scheduled_for"]) for data in inputs)
    # The first tick may predate the processes (a missed tick is run once); after
    # it, every 2-second tick has exactly one run and none is skipped.
    steady = ticks[1:]
    assert len(steady) >= 3
    assert all(later - earlier == datetime.timedelta(seconds=2) for earlier, later in itertools.pairwise(steady))
    assert len(set(ticks)) == len(ticks) == runs.count()


def test_schedule__a_tick_whose_run_was_purged_is_not_run_again_by_a_fresh_process(workers):
    env = worker_env(ORCHESTRATION_SCHEDULER="1")
    bills = Workflow.objects.filter(workflow_type="monthly_bill")  # its tick, the 1st of the month, has passed
    first = start_workers("--concurrency", "2", env=env)
    workers.append(first)
    assert wait_for(lambda: bills.filter(status="completed").exists(), timeout=30)
    stop(first)
    purged = run_manage("purge_workflows", "--older-than", "0", env=env)
    assert purged.returncode == 0 and not bills.exists(), purged.stdout + purged.stderr
    earlier = list(Workflow.objects.values_list("pk", flat=True))
    second = start_workers("--concurrency", "2", env=env)
    workers.append(second)
    # Two ticks of the every-2-seconds schedule started by the fresh process: it has passed over every schedule.
    later_ticks = Workflow.objects.filter(workflow_type="scheduled_tick").exclude(pk__in=earlier)
    assert wait_for(lambda: later_ticks.count() >= 2, timeout=30, interval=0.2)
    stop(second)
    assert not bills.exists()


def test_atomic_step__killed_between_its_write_and_its_end_leaves_no_partial_write(workers):
    marker = Path(tempfile.mkdtemp()) / "written"
    workflow = start_workflow("books_once", {"amount": 7, "marker": str(marker)})
    env = worker_env(ORCHESTRATION_STUCK_AFTER="2", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")
    victim = start_workers("--concurrency", "1", env=env)
    workers.append(victim)
    assert wait_for(marker.exists, timeout=30)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not LedgerEntry.objects.exists(), "the uncommitted write died with the worker"
    workers.append(start_workers("--concurrency", "1", env=env))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=30)
    assert list(LedgerEntry.objects.values_list("amount", flat=True)) == [7]
    assert Workflow.objects.get(pk=workflow.pk).attempts == 2


@pytest.mark.moments
def test_deadline__cancels_a_running_workflow_at_its_next_step_boundary_with_the_reason(workers):
    workflow = start_workflow("slow", {"seconds": 1, "steps": 8}, timeout=4)
    result = run_burst()
    assert result.returncode == 0, result.stdout + result.stderr
    workflow.refresh_from_db()
    assert workflow.status == "cancelled" and workflow.error_message.startswith("Deadline exceeded")
    steps = WorkflowStep.objects.filter(workflow=workflow)
    assert steps.filter(status="completed").count() < 8
    assert all(step.started_at < workflow.deadline for step in steps), "no step starts past the deadline"
    assert workflow.finished_at >= workflow.deadline
    assert timezone.now() - workflow.finished_at < datetime.timedelta(seconds=30)


def test_event_sent_before_the_wait__is_received_by_a_worker_process():
    workflow = start_workflow("awaits_approval")
    send_event(workflow.pk, "approval", {"early": True})
    result = run_burst()
    assert result.returncode == 0, result.stdout + result.stderr
    workflow.refresh_from_db()
    assert (workflow.status, workflow.output_data) == ("completed", {"decision": {"early": True}})


def test_event_wait_timeout__fails_the_workflow_in_a_worker_process(workers):
    workflow = start_workflow("awaits_approval", {"timeout": 1})
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.2"))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "failed", timeout=30)
    assert Workflow.objects.get(pk=workflow.pk).error_message.startswith("EventTimeout")


def test_a_failed_child__fails_its_parent_in_worker_processes(workers):
    parent = start_workflow("fan_out", {"children": 3, "child": "permanent_failure"})
    workers.append(start_workers("--concurrency", "2", "--poll-interval", "0.2"))
    assert wait_for(lambda: Workflow.objects.get(pk=parent.pk).status == "failed", timeout=60)
    assert "ChildWorkflowFailed" in Workflow.objects.get(pk=parent.pk).error_message

"""Steps that never return: a step's ``timeout=`` (or the workflow's
``step_timeout``) fails the attempt and gives the worker thread back, and a
run's deadline cancels it while a step still runs."""

from __future__ import annotations

import time

import pytest

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStep
from tests.acceptance.test_runworkers import wait_for
from tests.support import start_workers
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

#: How long a hung body sleeps: far longer than any wait below, so that only its timeout can end it.
HANG = 60
#: The timed-out body abandoned, the worker may restart (MAX_ABANDONED_BODIES): a new
#: process's start, which takes seconds on a loaded machine, and its claim.
RESTARTED = 30


def status_of(workflow):
    return Workflow.objects.get(pk=workflow.pk).status


def test_step_timeout__fails_the_attempt_and_the_retry_runs_the_step_again(workers):
    workflow = start_workflow("hangs_once", {"hang": HANG, "timeout": 1})
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: status_of(workflow) == "completed", timeout=RESTARTED)
    workflow.refresh_from_db()
    assert (workflow.attempts, workflow.output_data) == (2, {"attempt": 2})
    labels = StepRun.objects.filter(workflow_id=workflow.pk).order_by("id").values_list("label", flat=True)
    assert list(labels) == ["attempt 1", "attempt 2"]


def test_step_timeout__names_the_step_and_its_limit_in_the_error(workers):
    workflow = start_workflow("hangs_once", {"hang": HANG, "timeout": 1}, max_retries=0)
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: status_of(workflow) == "failed", timeout=20)
    workflow.refresh_from_db()
    assert workflow.error_message.startswith('Step 1 "hang" failed: StepTimeout: ')
    assert "timeout of 1s" in workflow.error_message
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert step.status == "failed" and "timeout of 1s" in step.error_message


def test_step_timeout__gives_the_worker_thread_back_while_the_body_still_runs(workers):
    hung = start_workflow("hangs_once", {"hang": HANG, "timeout": 1}, max_retries=0)
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=hung.pk).exists())
    started = time.monotonic()
    after = start_workflow("echo", "after the hung step")
    assert wait_for(lambda: status_of(after) == "completed", timeout=RESTARTED)
    assert time.monotonic() - started < HANG / 2
    assert status_of(hung) == "failed"


def test_step_timeout__of_the_workflow_applies_to_a_step_without_its_own(workers):
    workflow = start_workflow("hangs_once_by_default", {"hang": HANG})
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: status_of(workflow) == "completed", timeout=RESTARTED)
    workflow.refresh_from_db()
    assert (workflow.attempts, workflow.output_data) == (2, {"attempt": 2})


def test_workflow_timeout__cancels_the_run_while_a_step_still_runs(workers):
    workers.append(start_workers("--concurrency", "1"))
    ready = start_workflow("echo", "ready")  # the deadline starts counting once the worker runs
    assert wait_for(lambda: status_of(ready) == "completed", timeout=60)
    workflow = start_workflow("slow", {"seconds": 60, "steps": 1}, timeout=2)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    assert wait_for(lambda: status_of(workflow) == "cancelled", timeout=10)
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert step.status == "failed" and step.error_message.startswith("Deadline exceeded")

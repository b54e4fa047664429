"""The engine's control flow (a wait, a release at shutdown, a cancelled run, a
passed deadline) goes through a workflow's ``except Exception:``."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from orchestration import cancel_workflow, start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import stopped_during_its_first_step, wait_for
from tests.support import drain, run_burst, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def bodies_run(workflow):
    return sorted(StepRun.objects.filter(workflow_id=workflow.pk).values_list("label", flat=True))


def test_sleep__in_a_broad_except_still_suspends_the_run_until_it_is_due():
    workflow = start_workflow("sleeps_in_a_broad_except", {"seconds": 60})
    assert drain() == ["waiting"]
    workflow.refresh_from_db()
    assert workflow.status == "pending" and workflow.waiting_for.startswith("timer: nap")
    assert workflow.run_after > timezone.now() + datetime.timedelta(seconds=50)
    assert bodies_run(workflow) == []


def test_release_at_shutdown__in_a_broad_except_still_gives_the_run_back(workers):
    workflow = start_workflow("swallows_every_error", {"seconds": 2})
    output = stopped_during_its_first_step(workflow, workers)
    assert (workflow.status, workflow.attempts, workflow.current_step) == ("pending", 0, 1), output
    assert bodies_run(workflow) == ["step 1"]


def test_cancel__in_a_broad_except_still_stops_the_run(workers):
    workflow = start_workflow("swallows_every_error", {"seconds": 1.5})
    process = start_workers("--concurrency", "1", env=worker_env(ORCHESTRATION_HEARTBEAT_INTERVAL="0.3"))
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    cancel_workflow(workflow)
    # the step's body returns, and the run reaches its next step boundary
    assert wait_for(lambda: "stopped" in process.log_path.read_text(), timeout=15)
    workflow.refresh_from_db()
    assert workflow.status == "cancelled"
    assert bodies_run(workflow) == ["step 1"]


def test_deadline__in_a_broad_except_still_cancels_the_run():
    workflow = start_workflow("swallows_every_error", {"seconds": 1}, timeout=1.5)
    result = run_burst("--concurrency", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    workflow.refresh_from_db()
    assert workflow.status == "cancelled", workflow.error_message
    assert "handler" not in bodies_run(workflow)
    assert Workflow.objects.get(pk=workflow.pk).output_data is None

"""retry / restart / cancel, and the lease fencing that protects them from workers."""

import pytest

from orchestration import (
    InvalidTransition,
    cancel_workflow,
    recovery,
    restart_workflow,
    retry_workflow,
    start_workflow,
)
from orchestration.claim import claims
from orchestration.errors import LeaseLost, RunCancelled
from orchestration.models import WorkflowStep
from orchestration.worker import execute
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import drain

pytestmark = pytest.mark.django_db


def test_retry_workflow__sends_a_failed_workflow_back_to_pending_with_fresh_attempts():
    workflow = WorkflowFactory(status="failed", attempts=4, error_message="boom", current_step=1)
    WorkflowStepFactory(workflow=workflow, step_number=1)
    retried = retry_workflow(workflow)
    assert (retried.status, retried.attempts, retried.error_message, retried.current_step) == ("pending", 0, None, 1)
    assert WorkflowStep.objects.filter(workflow=workflow).count() == 1


def test_retry_workflow__accepts_an_id_as_string():
    workflow = WorkflowFactory(status="cancelled")
    assert retry_workflow(str(workflow.pk)).status == "pending"


@pytest.mark.parametrize("status", ["pending", "running", "completed"])
def test_retry_workflow__refuses_other_states(status):
    workflow = WorkflowFactory(status=status)
    with pytest.raises(InvalidTransition, match=f"it is {status}"):
        retry_workflow(workflow)


def test_retry_then_run__keeps_completed_steps():
    workflow = start_workflow("always_fails", max_retries=0)
    drain()
    WorkflowStep.objects.filter(workflow=workflow).delete()
    WorkflowStepFactory(workflow=workflow, step_number=1, step_name="boom", output_data="repaired by hand")
    retry_workflow(workflow)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == "repaired by hand"


def test_restart_workflow__discards_every_checkpoint():
    workflow = WorkflowFactory(status="completed", current_step=2, output_data={"x": 1})
    WorkflowStepFactory(workflow=workflow, step_number=1)
    WorkflowStepFactory(workflow=workflow, step_number=2)
    restarted = restart_workflow(workflow.pk)
    assert (restarted.status, restarted.current_step, restarted.output_data) == ("pending", 0, None)
    assert not WorkflowStep.objects.filter(workflow=workflow).exists()


def test_cancel_workflow__cancels_a_pending_workflow_so_no_worker_takes_it():
    workflow = start_workflow("three_steps")
    cancelled = cancel_workflow(workflow)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert drain() == []


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_cancel_workflow__refuses_finished_workflows(status):
    with pytest.raises(InvalidTransition):
        cancel_workflow(WorkflowFactory(status=status))


def test_cancel_workflow__a_running_workflow_stops_at_its_next_step_boundary():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    run.start_step(1, "first")
    cancel_workflow(workflow)
    with pytest.raises(RunCancelled):
        run.complete_step(1, {"late": True})
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert step.status == "failed" and "cancelled" in step.error_message
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("cancelled", 0)


def test_execute__a_cancelled_run_writes_nothing_more():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    cancel_workflow(workflow)
    assert execute(run) == "abandoned"
    workflow.refresh_from_db()
    assert workflow.status == "cancelled"
    # step 1 was recorded running by the claim, before the cancel; the cancel
    # failed it, and the run wrote neither its checkpoint nor any later step
    steps = WorkflowStep.objects.filter(workflow=workflow)
    assert [(step.step_number, step.status) for step in steps] == [(1, "failed")]
    assert steps.get().error_message.startswith("Workflow cancelled while this step ran")


def test_fence__a_stale_lease_cannot_write_after_a_new_claim():
    workflow = start_workflow("three_steps")
    stale = claims.claim("old-worker", None)[0]
    # The old worker is presumed dead: its workflow is reclaimed and claimed again.
    type(workflow).objects.filter(pk=workflow.pk).update(status="pending", lease_token=None)
    fresh = claims.claim("new-worker", None)[0]
    assert fresh.lease_token != stale.lease_token
    with pytest.raises(LeaseLost):
        stale.start_step(1, "first")
    with pytest.raises(LeaseLost):
        stale.complete({"zombie": True})
    assert stale.lost.is_set()
    assert execute(fresh) == "completed"
    workflow.refresh_from_db()
    assert workflow.worker_id == "new-worker" and workflow.output_data["steps"] == [1, 2, 3]


def test_release__gives_the_attempt_back():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    run.release()
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.lease_token) == ("pending", 0, None)


def test_heartbeat__refreshes_held_workflows_and_reports_lost_ones():
    kept_workflow = start_workflow("echo", 1)
    lost_workflow = start_workflow("echo", 2)
    runs = {run.id: run for run in claims.claim("w", None, limit=2)}
    cancel_workflow(lost_workflow)
    type(kept_workflow).objects.filter(pk=kept_workflow.pk).update(updated_at="2000-01-01T00:00:00Z")
    lost = recovery.heartbeat(list(runs.values()))
    assert [run.id for run in lost] == [lost_workflow.pk]
    kept_workflow.refresh_from_db()
    assert kept_workflow.updated_at.year > 2000

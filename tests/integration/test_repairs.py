"""The operator's repairs in the API: retry from a step, skip a failed step, requeue a stuck workflow."""

import pytest

from orchestration import InvalidTransition, InvalidWorkflowInput, start_workflow
from orchestration.api import requeue_stuck, retry_from_step, skip_step
from orchestration.claim import claims
from orchestration.errors import LeaseLost
from orchestration.models import Workflow, WorkflowStep
from tests.admin_support import failed_three_steps, stuck_running
from tests.factories import WorkflowFactory
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db


def steps_of(workflow):
    return list(
        WorkflowStep.objects.filter(workflow=workflow).order_by("step_number").values_list("step_number", "status")
    )


# -- retry_from_step ------------------------------------------------------------


def test_retry_from_step__discards_that_checkpoint_and_later_ones_and_keeps_earlier_ones():
    workflow = failed_three_steps()
    retried = retry_from_step(workflow, 1)
    assert (retried.status, retried.current_step, retried.attempts, retried.error_message) == ("pending", 0, 0, None)
    assert steps_of(workflow) == []


def test_retry_from_step__at_the_failed_step_is_a_plain_retry():
    workflow = failed_three_steps()
    retried = retry_from_step(workflow.pk, 2)
    assert (retried.status, retried.current_step) == ("pending", 1)
    assert steps_of(workflow) == [(1, "completed")]


def test_retry_from_step__then_a_worker_runs_only_the_discarded_steps_again():
    workflow = start_workflow("three_steps")
    assert drain() == ["completed"]
    Workflow.objects.filter(pk=workflow.pk).update(status="failed")  # say an operator wants step 2 redone
    StepRun.objects.all().delete()
    retry_from_step(workflow, 2)
    assert drain() == ["completed"]
    assert sorted(StepRun.objects.filter(workflow_id=workflow.pk).values_list("step_number", flat=True)) == [2, 3]


@pytest.mark.parametrize("status", ["pending", "running", "completed"])
def test_retry_from_step__refuses_a_workflow_that_is_not_failed_or_cancelled(status):
    workflow = WorkflowFactory(status=status)
    with pytest.raises(InvalidTransition, match=f"it is {status}"):
        retry_from_step(workflow, 1)


@pytest.mark.parametrize("number", [0, -1, True, "1"])
def test_retry_from_step__refuses_a_step_number_that_cannot_exist(number):
    workflow = failed_three_steps()
    with pytest.raises(InvalidTransition, match="numbered from 1"):
        retry_from_step(workflow, number)
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"


@pytest.mark.parametrize("number", [3, 99])
def test_retry_from_step__refuses_a_step_after_the_first_one_not_completed_and_changes_nothing(number):
    workflow = failed_three_steps()  # step 1 completed, step 2 failed: it can be retried from step 1 or 2
    expected = f"from step {number}: .* completed steps are 1 to 1, .* between 1 and 2"
    with pytest.raises(InvalidTransition, match=expected):
        retry_from_step(workflow, number)
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"
    assert steps_of(workflow) == [(1, "completed"), (2, "failed")]


def test_retry_from_step__refuses_step_2_of_a_run_whose_first_step_failed():
    workflow = start_workflow("always_fails", max_retries=0)
    assert drain() == ["failed"]
    with pytest.raises(InvalidTransition, match="this run has no completed step, so the step must be between 1 and 1"):
        retry_from_step(workflow, 2)


# -- skip_step --------------------------------------------------------------------


def test_skip_step__records_the_output_and_resumes_after_the_step():
    workflow = failed_three_steps()
    skipped = skip_step(workflow, 2, {"step": 2, "label": "done by hand"})
    assert (skipped.status, skipped.current_step, skipped.attempts, skipped.error_message) == ("pending", 2, 0, None)
    step = WorkflowStep.objects.get(workflow=workflow, step_number=2)
    assert (step.status, step.output_data, step.error_message) == (
        "completed",
        {"step": 2, "label": "done by hand"},
        None,
    )
    assert step.completed_at is not None


def test_skip_step__the_next_run_replays_the_supplied_output_without_running_the_step():
    workflow = start_workflow("always_fails", max_retries=0)
    assert drain() == ["failed"]
    StepRun.objects.all().delete()
    skip_step(workflow, 1, "repaired by hand")
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == "repaired by hand"
    assert not StepRun.objects.exists()


def test_skip_step__refuses_a_step_that_did_not_fail():
    workflow = failed_three_steps()
    with pytest.raises(InvalidTransition, match="step 1"):
        skip_step(workflow, 1, {})
    WorkflowStep.objects.filter(workflow=workflow, step_number=2).update(status="pending")
    with pytest.raises(InvalidTransition, match="has not failed"):
        skip_step(workflow, 2, {})
    # Nothing changed, not even the workflow row the first UPDATE touched.
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("failed", 1)


def test_skip_step__refuses_a_running_workflow():
    workflow = stuck_running()
    with pytest.raises(InvalidTransition, match="it is running"):
        skip_step(workflow, 1, {})


def test_skip_step__refuses_output_that_is_not_json():
    workflow = failed_three_steps()
    with pytest.raises(InvalidWorkflowInput, match="not JSON-serialisable"):
        skip_step(workflow, 2, {"when": object()})
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"


# -- requeue_stuck --------------------------------------------------------------------


def test_requeue_stuck__sends_a_silent_running_workflow_back_to_pending():
    workflow = stuck_running(seconds_since_heartbeat=600)
    requeued = requeue_stuck(workflow, stuck_after=300)
    assert (requeued.status, requeued.lease_token, requeued.attempts) == ("pending", None, 1)  # attempt stays spent
    assert "requeued by an operator" in requeued.error_message
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert step.status == "failed" and "requeued by an operator" in step.error_message


def test_requeue_stuck__leaves_a_workflow_whose_worker_heartbeats():
    workflow = stuck_running(seconds_since_heartbeat=5)
    with pytest.raises(InvalidTransition, match="no heartbeat for 300 seconds"):
        requeue_stuck(workflow, stuck_after=300)
    assert Workflow.objects.get(pk=workflow.pk).status == "running"


def test_requeue_stuck__defaults_to_the_stuck_after_setting(settings):
    settings.ORCHESTRATION = {**settings.ORCHESTRATION, "STUCK_AFTER": 1000}
    with pytest.raises(InvalidTransition, match="1000 seconds"):
        requeue_stuck(stuck_running(seconds_since_heartbeat=600))


def test_requeue_stuck__the_old_worker_can_write_nothing_more():
    workflow = start_workflow("three_steps")
    run = claims.claim("dead-worker", None)[0]
    Workflow.objects.filter(pk=workflow.pk).update(updated_at=workflow.created_at.replace(year=2000))
    requeue_stuck(workflow, stuck_after=60)
    with pytest.raises(LeaseLost):
        run.start_step(1, "first")
    assert drain() == ["completed"]

"""Step checkpointing, replay, retries and failures, run in the test's thread."""

import datetime
import logging
import uuid

import pytest
from django.utils import timezone

from orchestration import start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStep
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db


def steps_of(workflow):
    return list(WorkflowStep.objects.filter(workflow=workflow).order_by("step_number"))


def test_workflow__runs_its_steps_in_order_and_stores_the_return_value():
    workflow = start_workflow("three_steps", {"x": 1})
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.status == "completed" and workflow.current_step == 3 and workflow.attempts == 1
    assert workflow.output_data == {"steps": [1, 2, 3], "input": {"x": 1}}
    steps = steps_of(workflow)
    assert [(s.step_number, s.step_name, s.status) for s in steps] == [
        (1, "first", "completed"),
        (2, "second", "completed"),
        (3, "third", "completed"),
    ]
    assert all(s.started_at <= s.completed_at for s in steps)
    assert steps[0].output_data == {"step": 1, "label": "first"}
    assert workflow.finished_at is not None and workflow.lease_token is None


def test_retry__resumes_after_the_last_completed_step():
    workflow = start_workflow("flaky", {"succeed_on": 3})
    assert drain() == ["retrying", "retrying", "completed"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.output_data) == ("completed", 3, {"attempt": 3})
    # "prepare" ran once; the flaky step's body ran on each attempt.
    assert StepRun.objects.filter(label="prepare").count() == 1
    assert StepRun.objects.filter(label="flaky").count() == 3
    flaky_step = steps_of(workflow)[1]
    assert (flaky_step.status, flaky_step.attempts, flaky_step.error_message) == ("completed", 3, None)


def test_failed_step__is_recorded_with_its_error_and_the_workflow_retries_with_backoff():
    workflow = start_workflow("always_fails")
    from orchestration.worker import execute

    assert execute(claims.claim("w", None)[0]) == "retrying"
    workflow.refresh_from_db()
    step = steps_of(workflow)[0]
    assert (step.status, step.error_message) == ("failed", "ValueError: boom")
    assert step.completed_at is not None
    assert workflow.status == "pending" and workflow.run_after > workflow.updated_at
    assert workflow.error_message == 'Step 1 "boom" failed: ValueError: boom'
    assert "Traceback" in workflow.error_traceback


def test_retries__fail_the_workflow_after_max_retries_plus_one_attempts():
    workflow = start_workflow("always_fails")  # max_retries=2
    assert drain() == ["retrying", "retrying", "failed"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts) == ("failed", 3)
    assert workflow.error_message == 'Step 1 "boom" failed: ValueError: boom'
    assert StepRun.objects.count() == 3


def test_permanent_error__fails_at_once_without_retries():
    workflow = start_workflow("permanent_failure")
    assert drain() == ["failed"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts) == ("failed", 1)
    assert workflow.error_message == 'Step 1 "charge" failed: PermanentError: card declined'


def test_non_json_step_result__fails_at_once_naming_the_step():
    workflow = start_workflow("non_json_step")
    assert drain() == ["failed"]
    workflow.refresh_from_db()
    assert workflow.attempts == 1
    assert "The result of step 1 'returns a set' is not JSON-serialisable" in workflow.error_message


def test_non_json_return_value__fails_at_once():
    workflow = start_workflow("non_json_output")
    assert drain() == ["failed"]
    workflow.refresh_from_db()
    assert "return value of workflow 'non_json_output' is not JSON-serialisable" in workflow.error_message


def test_unregistered_type__goes_back_to_pending_untouched_and_the_worker_carries_on():
    unknown = WorkflowFactory(workflow_type="nobody_registers_this")
    good = start_workflow("three_steps")
    assert sorted(drain()) == ["completed", "not registered here"]
    unknown.refresh_from_db()
    good.refresh_from_db()
    assert (unknown.status, unknown.attempts, unknown.started_at, unknown.lease_token) == ("pending", 0, None, None)
    assert (unknown.error_message, unknown.error_history, unknown.current_step) == (None, None, 0)
    assert unknown.waiting_for == "worker: one that registers workflow type 'nobody_registers_this'"
    assert not WorkflowStep.objects.filter(workflow=unknown).exists()
    assert good.status == "completed"


def test_unregistered_type__waits_a_second_when_young_and_a_minute_at_most_when_old():
    young = WorkflowFactory(workflow_type="nobody_registers_this")
    old = WorkflowFactory(workflow_type="nobody_registers_this")
    Workflow.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=2))
    assert drain() == ["not registered here"] * 2
    # From the moment it was given back (updated_at, written by the same statement).
    waits = {
        pk: (run_after - given_back).total_seconds()
        for pk, run_after, given_back in Workflow.objects.values_list("pk", "run_after", "updated_at")
    }
    assert waits[young.pk] == pytest.approx(1.0, abs=0.01) and waits[old.pk] == pytest.approx(60.0, abs=0.01)


def test_unregistered_type__never_fails_however_often_it_is_claimed():
    unknown = WorkflowFactory(workflow_type="nobody_registers_this", max_retries=0)
    for _ in range(5):
        Workflow.objects.filter(pk=unknown.pk).update(run_after=None)  # its wait over
        assert drain() == ["not registered here"]
    unknown.refresh_from_db()
    assert (unknown.status, unknown.attempts) == ("pending", 0)


def test_unregistered_type__is_logged_once_per_type_by_a_process(caplog):
    first, other = (f"new_code_{uuid.uuid4().hex[:8]}" for _ in range(2))  # never logged by this process before
    for workflow_type in (first, first, other):
        WorkflowFactory(workflow_type=workflow_type)
    with caplog.at_level(logging.WARNING, logger="orchestration"):
        assert drain() == ["not registered here"] * 3
        Workflow.objects.update(run_after=None)
        assert drain() == ["not registered here"] * 3
    logged = [
        record.getMessage() for record in caplog.records if "does not register workflow type" in record.getMessage()
    ]
    assert len(logged) == 2 and any(f"'{other}'" in line for line in logged)


def test_unregistered_type__a_run_that_made_progress_keeps_its_steps_and_start():
    workflow = WorkflowFactory(workflow_type="nobody_registers_this", attempts=2, current_step=1)
    WorkflowStepFactory(workflow=workflow, step_number=1)
    started = timezone.now() - datetime.timedelta(minutes=5)
    Workflow.objects.filter(pk=workflow.pk).update(started_at=started)
    assert drain() == ["not registered here"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.started_at, workflow.current_step) == (
        "pending",
        2,
        started,
        1,
    )
    assert list(WorkflowStep.objects.filter(workflow=workflow).values_list("status", flat=True)) == ["completed"]


def test_replay_calling_a_different_step_name__fails_as_non_deterministic():
    workflow = start_workflow("changes_its_steps")
    assert drain() == ["retrying", "failed"]
    workflow.refresh_from_db()
    assert workflow.status == "failed"
    assert "Non-deterministic workflow: step 1 was recorded as 'first (attempt 1)'" in workflow.error_message


def test_completed_steps__replay_their_stored_output_without_running():
    workflow = start_workflow("three_steps")
    WorkflowStep.objects.create(
        workflow=workflow,
        step_number=1,
        step_name="first",
        status="completed",
        output_data={"step": 1, "label": "stored"},
    )
    drain()
    workflow.refresh_from_db()
    assert workflow.status == "completed"
    assert list(StepRun.objects.values_list("step_number", flat=True).order_by("step_number")) == [2, 3]


def test_claim__takes_higher_priority_first_then_oldest():
    low = start_workflow("echo", "low")
    high = start_workflow("echo", "high", priority=10)
    older = start_workflow("echo", "older-low")

    order = [claims.claim("w", None)[0].id for _ in range(3)]
    assert order == [high.pk, low.pk, older.pk]


def test_claim__respects_queues_and_run_after():
    import datetime

    from django.utils import timezone

    start_workflow("echo", "later", run_after=timezone.now() + datetime.timedelta(hours=1))
    other = start_workflow("on_other_queue", "x")
    assert claims.claim("w", ["default"]) == []
    assert [run.id for run in claims.claim("w", ["other"])] == [other.pk]


@pytest.mark.parametrize("queue", ['say "hi"', "back\\slash", "{braces}", "NULL", "ümlaut é"])
def test_claim__serves_a_queue_whose_name_an_array_literal_would_quote(queue):
    run = start_workflow("echo", "x", queue=queue)
    assert claims.claim("w", ["default"]) == []
    assert [claimed.id for claimed in claims.claim("w", ["default", queue])] == [run.pk]


def test_claim__sets_running_a_fresh_lease_and_counts_the_attempt():

    workflow = start_workflow("echo", 1)
    run = claims.claim("worker-a", None)[0]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.worker_id) == ("running", 1, "worker-a")
    assert workflow.lease_token == run.lease_token and workflow.started_at is not None

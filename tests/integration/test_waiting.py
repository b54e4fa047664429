"""Timers, events, child workflows, deadlines and atomic steps, run in the test's thread."""

import datetime
import time

import pytest
from django.utils import timezone

from orchestration import InvalidTransition, cancel_workflow, moments, send_event, start_workflow, waits
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowEvent, WorkflowStep
from tests.support import drain
from tests.testapp.models import LedgerEntry, StepRun

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def test_sleep__releases_the_workflow_until_its_wake_up_time_without_spending_an_attempt():
    workflow = start_workflow("sleeper", {"seconds": 60})
    before = timezone.now()
    assert drain() == ["waiting"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.lease_token) == ("pending", 0, None)
    assert before + datetime.timedelta(seconds=59) < workflow.run_after < before + datetime.timedelta(seconds=61)
    assert workflow.waiting_for.startswith("timer: nap until")
    nap = WorkflowStep.objects.get(workflow=workflow, step_number=2)
    assert (nap.step_name, nap.status) == ("nap", "pending")
    assert "wake_at" in nap.output_data


def test_sleep__shorter_than_a_claim_lasts_at_least_its_duration():
    run = start_workflow("naps_briefly", {"seconds": 0.04})
    assert drain() == ["completed"]
    run.refresh_from_db()
    assert run.output_data >= 0.04


def test_wait_for_event__with_a_short_timeout_times_out_no_earlier_than_it():
    run = start_workflow("waits_briefly_for_an_event", {"seconds": 0.04})
    assert drain() == ["completed"]
    run.refresh_from_db()
    assert run.output_data >= 0.04


def test_sleep__resumes_after_the_timer_and_never_reruns_earlier_steps():
    workflow = start_workflow("sleeper", {"seconds": 0.3})
    assert drain() == ["waiting"]
    assert drain() == []  # not due yet
    time.sleep(0.4)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.waiting_for) == ("completed", 1, None)
    assert list(StepRun.objects.values_list("label", flat=True).order_by("id")) == ["before", "after"]
    assert WorkflowStep.objects.get(workflow=workflow, step_number=2).status == "completed"


def test_sleep__rejects_a_negative_duration():
    start_workflow("sleeper", {"seconds": -1})
    assert drain() == ["failed"]
    assert "must be a number of seconds or a timedelta >= 0" in Workflow.objects.get().error_message


def test_event_sent_before_the_wait__is_kept_and_received():
    workflow = start_workflow("awaits_approval")
    send_event(workflow.pk, "approval", {"approved": True})
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"decision": {"approved": True}}
    assert WorkflowEvent.objects.get().consumed_by_step == 1


def test_event_sent_after_the_wait__wakes_the_waiting_workflow():
    workflow = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    workflow.refresh_from_db()
    assert workflow.waiting_for == "event: approval" and workflow.run_after == moments.as_django(waits.WAIT_FOREVER)
    send_event(str(workflow.pk), "approval", "yes")
    workflow.refresh_from_db()
    assert workflow.run_after is None
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"decision": "yes"}


def test_event_with_another_name__does_not_wake_the_workflow():
    workflow = start_workflow("awaits_approval")
    drain()
    send_event(workflow.pk, "rejection", None)
    assert drain() == []
    assert Workflow.objects.get(pk=workflow.pk).waiting_for == "event: approval"


def test_event_wait_timeout__raises_event_timeout_which_fails_the_workflow():
    workflow = start_workflow("awaits_approval", {"timeout": 0.3})
    assert drain() == ["waiting"]
    assert timezone.now() < Workflow.objects.get(pk=workflow.pk).run_after < timezone.now() + datetime.timedelta(1)
    time.sleep(0.4)
    assert drain() == ["failed"]
    workflow.refresh_from_db()
    assert workflow.error_message == "EventTimeout: No 'approval' event arrived before the wait's timeout."


def test_send_event__refuses_a_finished_workflow_and_non_json_payloads():
    workflow = start_workflow("echo", 1)
    drain()
    with pytest.raises(InvalidTransition, match="it is completed"):
        send_event(workflow.pk, "approval", {})
    other = start_workflow("awaits_approval")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        send_event(other.pk, "approval", {1, 2})
    assert not WorkflowEvent.objects.exists()


def test_children__are_started_once_and_their_outputs_returned_in_order():
    parent = start_workflow("fan_out", {"children": 5})
    outcomes = drain()
    assert outcomes.count("completed") == 6
    parent.refresh_from_db()
    assert parent.status == "completed" and parent.output_data == [0, 1, 4, 9, 16]
    children = Workflow.objects.filter(parent=parent)
    assert children.count() == 5 and {child.idempotency_key for child in children} == {
        f"child:{parent.pk}:{n}" for n in range(1, 6)
    }


def test_wait_for__a_child_listed_twice_returns_its_output_twice():
    parent = start_workflow("waits_for_one_child_twice")
    assert drain(max_runs=10) == ["waiting", "completed", "completed"]
    parent.refresh_from_db()
    assert (parent.status, parent.output_data) == ("completed", [9, 9])


def test_children__the_waiting_parent_is_woken_when_a_child_finishes():
    parent = start_workflow("fan_out", {"children": 1})
    from orchestration.worker import execute

    assert execute(claims.claim("w", None)[0]) == "waiting"  # the parent starts its child, then waits
    parent.refresh_from_db()
    assert parent.waiting_for == "children: 0 of 1 finished"
    assert execute(claims.claim("w", None)[0]) == "completed"  # the child
    parent.refresh_from_db()
    assert parent.run_after is None, "woken by its child"


def test_a_failed_child__fails_its_parent_with_the_childs_error():
    parent = start_workflow("fan_out", {"children": 2, "child": "permanent_failure"})
    drain()
    parent.refresh_from_db()
    assert parent.status == "failed"
    assert "ChildWorkflowFailed: Child workflow" in parent.error_message
    assert "(permanent_failure) failed" in parent.error_message and "card declined" in parent.error_message


def test_deadline__cancels_the_workflow_at_its_next_step_boundary_with_the_reason():
    workflow = start_workflow("three_steps", timeout=0.2)
    time.sleep(0.3)
    assert drain() == ["cancelled"]
    workflow.refresh_from_db()
    assert workflow.status == "cancelled" and workflow.error_message.startswith("Deadline exceeded")
    assert not StepRun.objects.exists()


def test_deadline__bounds_a_wait():
    workflow = start_workflow("awaits_approval", timeout=30)
    drain()
    workflow.refresh_from_db()
    assert workflow.run_after == workflow.deadline


def test_atomic_step__a_failure_rolls_back_the_steps_own_writes():
    workflow = start_workflow("atomic_fails")
    assert drain() == ["failed"]
    assert not LedgerEntry.objects.exists()
    step = WorkflowStep.objects.get(workflow=workflow)
    assert step.status == "failed" and step.error_message == "ValueError: failed after writing"


def test_atomic_step__writes_and_checkpoint_commit_together():
    workflow = start_workflow("books_once", {"amount": 42})
    assert drain() == ["completed"]
    assert list(LedgerEntry.objects.values_list("amount", flat=True)) == [42]
    assert WorkflowStep.objects.get(workflow=workflow).output_data == {"booked": 42}


def test_start_workflow__timeout_sets_the_deadline_and_rejects_bad_values():
    workflow = start_workflow("three_steps", timeout=datetime.timedelta(minutes=5))
    assert timezone.now() + datetime.timedelta(minutes=4) < workflow.deadline
    with pytest.raises(ValueError, match="timeout"):
        start_workflow("three_steps", timeout=-1)


def test_send_event__refuses_a_name_too_long_to_be_waited_for():
    workflow = start_workflow("awaits_approval")
    with pytest.raises(ValueError, match="longer than 150 characters"):
        send_event(workflow.pk, "x" * 151, {})
    assert not WorkflowEvent.objects.exists()


def test_cancel__a_waiting_workflow_ends_its_wait_step():
    workflow = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    cancel_workflow(workflow, "no longer needed")
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert (step.status, step.error_message) == ("failed", "Workflow cancelled while it waited: no longer needed")
    assert step.completed_at is not None

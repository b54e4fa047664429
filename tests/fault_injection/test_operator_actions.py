"""The operator's repairs do what they say: a repaired run gets its time limit
afresh, and a run started again from a step starts that step's children again
and receives again the events that step consumed."""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from orchestration import (
    InvalidTransition,
    cancel_workflow,
    restart_workflow,
    retry_workflow,
    send_event,
    start_workflow,
)
from orchestration.api import retry_from_step, skip_step
from orchestration.models import Workflow
from tests.factories import WorkflowFactory
from tests.support import drain

# transaction=True: a step of a run with a deadline runs in a thread of its own, on its own connection
pytestmark = pytest.mark.django_db(transaction=True)

#: The runs' time limit, in seconds: long enough for a drain of a few steps, short to wait out.
TIMEOUT = 1.0


def cancelled_by_its_deadline() -> Workflow:
    workflow = start_workflow("three_steps", timeout=TIMEOUT)
    time.sleep(TIMEOUT + 0.05)
    assert drain() == ["cancelled"]
    workflow.refresh_from_db()
    assert workflow.error_message.startswith("Deadline exceeded")
    return workflow


def test_retry_workflow__of_a_run_cancelled_by_its_deadline_runs_with_a_fresh_deadline():
    workflow = cancelled_by_its_deadline()
    retry_workflow(workflow)
    assert drain() == ["completed"]


def test_retry_workflow__of_a_row_without_a_timeout_takes_its_limit_from_its_first_deadline():
    created = timezone.now() - datetime.timedelta(minutes=1)
    legacy = WorkflowFactory(status="cancelled", created_at=created, deadline=created + datetime.timedelta(seconds=5))
    before = timezone.now()
    retried = retry_workflow(legacy)
    assert before + datetime.timedelta(seconds=4) < retried.deadline < timezone.now() + datetime.timedelta(seconds=6)
    assert drain() == ["completed"]


def test_retry_from_step__of_a_run_cancelled_by_its_deadline_runs_with_a_fresh_deadline():
    workflow = cancelled_by_its_deadline()
    retry_from_step(workflow, 1)
    assert drain() == ["completed"]


def test_restart_workflow__of_a_run_with_a_timeout_runs_with_a_fresh_deadline():
    workflow = start_workflow("three_steps", timeout=TIMEOUT)
    assert drain() == ["completed"]
    time.sleep(TIMEOUT + 0.05)
    restart_workflow(workflow)
    assert drain() == ["completed"]


def test_skip_step__of_a_failed_run_past_its_deadline_runs_with_a_fresh_deadline():
    workflow = start_workflow("flaky", {"succeed_on": 99}, max_retries=0, timeout=TIMEOUT)
    assert drain() == ["failed"]
    time.sleep(TIMEOUT + 0.05)
    skip_step(workflow, 2, {"attempt": 0})
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"attempt": 0}


def test_restart_workflow__of_a_parent_starts_fresh_children():
    parent = start_workflow("fan_out", {"children": 2})
    drain()
    first_run = set(Workflow.objects.filter(parent=parent).values_list("pk", flat=True))
    restart_workflow(parent)
    drain()
    parent.refresh_from_db()
    assert (parent.status, parent.output_data) == ("completed", [0, 1])
    fresh = Workflow.objects.filter(parent=parent).exclude(pk__in=first_run)
    assert sorted(fresh.values_list("status", flat=True)) == ["completed", "completed"]


def test_restart_workflow__delivers_again_the_events_the_first_run_consumed():
    workflow = start_workflow("awaits_approval")
    send_event(workflow, "approval", "yes")
    assert drain() == ["completed"]
    restart_workflow(workflow)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"decision": "yes"}


def test_restart_workflow__is_refused_while_a_child_of_the_previous_run_is_unfinished():
    # Detached: the parent's cancel leaves it waiting.
    parent = start_workflow("fan_out", {"children": 1, "child": "awaits_approval", "child_options": {"detached": True}})
    assert drain() == ["waiting", "waiting"]
    cancel_workflow(parent)
    (child,) = Workflow.objects.filter(parent=parent)
    with pytest.raises(InvalidTransition, match=f"child workflow {child.pk} .* is still pending"):
        restart_workflow(parent)
    assert Workflow.objects.get(pk=parent.pk).status == "cancelled"


def test_retry_from_step__starts_afresh_the_children_of_the_discarded_steps():
    parent = start_workflow("fan_out", {"children": 1, "child": "permanent_failure"})
    drain()
    (first_child,) = Workflow.objects.filter(parent=parent)
    retry_from_step(parent, 1)
    drain()
    children = Workflow.objects.filter(parent=parent)
    assert children.count() == 2
    (fresh,) = children.exclude(pk=first_child.pk)
    assert f"Child workflow {fresh.pk}" in Workflow.objects.get(pk=parent.pk).error_message


def test_retry_from_step__delivers_again_the_event_its_discarded_step_consumed():
    workflow = start_workflow("acts_on_approval")
    send_event(workflow, "approval", "yes")
    assert drain() == ["failed"]
    retry_from_step(workflow, 1)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"acted_on": "yes"}

"""A parent's cancel stops its unfinished children, down the tree, but for the
detached; a parent that ends on its own leaves its children as they are."""

from __future__ import annotations

import datetime
import io

import pytest
from django.core.management import call_command
from django.db.models.functions import Now

from orchestration import InvalidTransition, cancel_workflow, start_workflow
from orchestration.claim import claims
from orchestration.errors import RunCancelled
from orchestration.models import Workflow, WorkflowStep
from orchestration.transitions import children_to_stop
from orchestration.worker import execute
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import drain

pytestmark = pytest.mark.django_db


def statuses(*workflows: Workflow) -> list[str]:
    return [Workflow.objects.get(pk=workflow.pk).status for workflow in workflows]


def test_cancel_workflow__cancels_its_pending_and_running_children():
    parent = WorkflowFactory(status="running")
    pending, running = WorkflowFactory(parent=parent), WorkflowFactory(parent=parent, status="running")
    cancel_workflow(parent)
    assert statuses(parent, pending, running) == ["cancelled"] * 3


def test_cancel_workflow__a_childs_error_message_names_its_parent_and_the_reason():
    parent = WorkflowFactory(status="running")
    child = WorkflowFactory(parent=parent)
    cancel_workflow(parent, "batch no longer needed")
    child.refresh_from_db()
    assert child.error_message == f"Cancelled with its parent workflow {parent.pk}: batch no longer needed"
    assert child.finished_at is not None and child.error_history[0]["message"] == child.error_message


def test_cancel_workflow__cancels_the_children_of_its_children_down_the_tree():
    parent = WorkflowFactory(status="pending")
    child = WorkflowFactory(parent=parent, status="pending")
    grandchild = WorkflowFactory(parent=child, status="running")
    great_grandchild = WorkflowFactory(parent=grandchild)
    cancel_workflow(parent)
    assert statuses(child, grandchild, great_grandchild) == ["cancelled"] * 3
    great_grandchild.refresh_from_db()
    assert great_grandchild.error_message.startswith(f"Cancelled with its parent workflow {grandchild.pk}:")


def test_cancel_workflow__leaves_a_detached_child_and_its_children_running():
    parent = WorkflowFactory(status="running")
    detached = WorkflowFactory(parent=parent, status="running", detached=True)
    its_child = WorkflowFactory(parent=detached)
    attached = WorkflowFactory(parent=parent)
    cancel_workflow(parent)
    assert statuses(detached, its_child, attached) == ["running", "pending", "cancelled"]


def test_cancel_workflow__leaves_finished_children_and_the_children_of_a_finished_one_as_they_are():
    parent = WorkflowFactory(status="running")
    completed = WorkflowFactory(parent=parent, status="completed")
    failed = WorkflowFactory(parent=parent, status="failed")
    left_by_completed = WorkflowFactory(parent=completed, status="running")
    cancel_workflow(parent)
    assert statuses(completed, failed, left_by_completed) == ["completed", "failed", "running"]


def test_cancel_workflow__a_running_childs_worker_stops_at_its_next_step_boundary():
    parent = WorkflowFactory(status="running")
    child = start_workflow("three_steps")
    Workflow.objects.filter(pk=child.pk).update(parent=parent)
    run = claims.claim("w", None)[0]
    run.start_step(1, "first")
    cancel_workflow(parent)
    with pytest.raises(RunCancelled):
        run.complete_step(1, {"late": True})
    step = WorkflowStep.objects.get(workflow=child, step_number=1)
    assert step.status == "failed"
    assert step.error_message.startswith(
        f"Workflow cancelled while this step ran: Cancelled with its parent workflow {parent.pk}"
    )


def test_cancel_workflow__a_waiting_childs_wait_step_ends_too():
    parent = WorkflowFactory(status="running")
    child = WorkflowFactory(parent=parent, status="pending", waiting_for="event: approval")
    WorkflowStepFactory(workflow=child, step_number=1, status="pending", output_data={"event": "approval"})
    cancel_workflow(parent)
    step = WorkflowStep.objects.get(workflow=child)
    assert step.status == "failed" and step.error_message.startswith("Workflow cancelled while it waited:")


def test_cancel_workflow__a_child_started_with_detached_runs_to_its_end():
    parent = start_workflow("fan_out", {"children": 2, "child_options": {"detached": True}})
    run = claims.claim("w", None)[0]
    assert execute(run) == "waiting"
    children = list(Workflow.objects.filter(parent=parent))
    assert [child.detached for child in children] == [True, True]
    cancel_workflow(parent)
    assert drain() == ["completed", "completed"]
    assert statuses(*children) == ["completed", "completed"]


def test_cancel_workflow__the_children_a_fan_out_started_are_cancelled_and_never_run():
    parent = start_workflow("fan_out", {"children": 3})
    assert execute(claims.claim("w", None)[0]) == "waiting"
    cancel_workflow(parent)
    assert drain() == []
    assert statuses(*Workflow.objects.filter(parent=parent)) == ["cancelled"] * 3


@pytest.mark.moments
def test_deadline__a_parent_cancelled_at_its_deadline_cancels_its_children():
    parent = start_workflow("fan_out", {"children": 2, "child": "awaits_approval"}, timeout=3600)
    assert execute(claims.claim("w", None)[0]) == "waiting"
    # A second ago: the worker reads the database's clock, and its reading may lag by half a round trip.
    Workflow.objects.filter(pk=parent.pk).update(deadline=Now() - datetime.timedelta(seconds=1), run_after=None)
    assert drain() == ["cancelled"]  # the parent, claimed first: its children never run
    children = Workflow.objects.filter(parent=parent)
    assert statuses(*children) == ["cancelled", "cancelled"]
    assert all(child.error_message.startswith(f"Cancelled with its parent workflow {parent.pk}: Deadline exceeded")
               for child in children)  # fmt: skip


def test_a_parent_that_completes_on_its_own__leaves_the_child_it_never_waited_for_as_it_is():
    parent = start_workflow("start_a_shipment", {"order_id": 7, "address": "1 Main St"})
    assert execute(claims.claim("w", None)[0]) == "completed"
    child = Workflow.objects.get(parent=parent)
    assert child.status == "pending"
    assert drain() == ["completed"]


def test_children_to_stop__counts_the_unfinished_attached_ones_down_the_tree():
    parent = WorkflowFactory(status="running")
    child = WorkflowFactory(parent=parent)
    WorkflowFactory(parent=child, status="running")
    WorkflowFactory(parent=parent, status="completed")
    WorkflowFactory(parent=parent, detached=True)
    assert children_to_stop([parent.pk]) == 2


def test_workflows_cancel_command__cancels_the_children_too():
    parent = WorkflowFactory(status="running")
    child = WorkflowFactory(parent=parent)
    call_command("workflows", "cancel", str(parent.pk), stdout=io.StringIO(), stderr=io.StringIO())
    child.refresh_from_db()
    assert child.status == "cancelled" and str(parent.pk) in child.error_message


def test_cancel_workflow__a_refused_cancel_leaves_the_children_as_they_are():
    parent = WorkflowFactory(status="completed")
    child = WorkflowFactory(parent=parent, status="running")
    with pytest.raises(InvalidTransition, match="Cannot cancel"):
        cancel_workflow(parent)
    assert statuses(child) == ["running"]

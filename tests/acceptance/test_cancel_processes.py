"""A parent's cancel with real ``runworkers`` processes: its running children
stop at their next step boundary, its detached children run to their end, and
a deadline cancels the children of the run it ends."""

from __future__ import annotations

import time

import pytest

from orchestration import cancel_workflow, start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import start_workers
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

#: Children that run long enough to be running when their parent is cancelled.
LONG_CHILDREN = {"children": 3, "child": "slow", "child_input": {"seconds": 0.5, "steps": 40}}


def children_of(parent: Workflow):
    return Workflow.objects.filter(parent=parent)


def test_cancel__a_parents_running_children_stop_at_their_next_step_boundary(workers):
    parent = start_workflow("fan_out", LONG_CHILDREN)
    workers.append(start_workers("--concurrency", "4", "--poll-interval", "0.2"))
    assert wait_for(lambda: children_of(parent).filter(status="running").count() == 3, timeout=30)
    cancel_workflow(parent, "batch stopped")
    bodies = StepRun.objects.filter(workflow_id__in=children_of(parent).values("pk"))
    started = bodies.count()
    assert list(children_of(parent).values_list("status", flat=True)) == ["cancelled"] * 3
    for child in children_of(parent):
        assert child.error_message == f"Cancelled with its parent workflow {parent.pk}: batch stopped"
    time.sleep(2)  # four step bodies' time: a child still running would have started more
    assert bodies.count() == started
    assert list(children_of(parent).values_list("status", flat=True)) == ["cancelled"] * 3
    freed = start_workflow("three_steps")  # the workers that ran the children are free again
    assert wait_for(lambda: Workflow.objects.get(pk=freed.pk).status == "completed", timeout=30)


def test_cancel__a_parents_detached_children_run_to_their_end(workers):
    data = {"children": 3, "child": "slow", "child_input": {"seconds": 0.3, "steps": 4}}
    parent = start_workflow("fan_out", {**data, "child_options": {"detached": True}})
    workers.append(start_workers("--concurrency", "4", "--poll-interval", "0.2"))
    assert wait_for(lambda: children_of(parent).filter(status="running").count() == 3, timeout=30)
    cancel_workflow(parent)
    assert Workflow.objects.get(pk=parent.pk).status == "cancelled"
    assert wait_for(lambda: children_of(parent).filter(status="completed").count() == 3, timeout=30)


def test_deadline__the_run_it_cancels_cancels_its_children(workers):
    workers.append(start_workers("--concurrency", "4", "--poll-interval", "0.2"))
    # The deadline counts from the start: the worker runs first, however long a loaded machine takes to start it.
    ready = start_workflow("echo", "ready")
    assert wait_for(lambda: Workflow.objects.get(pk=ready.pk).status == "completed", timeout=60)
    parent = start_workflow("fan_out", LONG_CHILDREN, timeout=3)
    assert wait_for(lambda: children_of(parent).filter(status="cancelled").count() == 3, timeout=30)
    parent.refresh_from_db()
    assert parent.status == "cancelled" and parent.error_message.startswith("Deadline exceeded")
    for child in children_of(parent):
        assert child.error_message.startswith(f"Cancelled with its parent workflow {parent.pk}: Deadline exceeded")

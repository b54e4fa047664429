"""Fan-out: ``ctx.start_children`` starts a batch in one recorded step, and
``ctx.wait_for`` wakes its parent once the wait can end, with every child's
outcome (``return_exceptions``) or at the first failure."""

from __future__ import annotations

import re
import tracemalloc
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orchestration import cancel_workflow, fork_workflow, send_event, start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStep
from orchestration.worker import execute
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db


def batch(inputs: list[Any], **data: Any) -> Workflow:
    return start_workflow("batch", {"inputs": inputs, **data})


def claims_of(parent: Workflow) -> int:
    """How many times ``batch`` ran: its first claim, and each wake-up."""
    return StepRun.objects.filter(workflow_id=parent.pk, label="batch claimed").count()


def children_of(parent: Workflow) -> list[Workflow]:
    """In the order they were started (their keys end with their index)."""
    children = Workflow.objects.filter(parent=parent)
    return sorted(children, key=lambda child: int(child.idempotency_key.rsplit(":", 1)[1]))


def waiting_batch(count: int, **data: Any) -> tuple[Workflow, list[Workflow]]:
    """A parent waiting for ``count`` children, each waiting for its "approval" event."""
    parent = batch([{}] * count, child="awaits_approval", **data)
    assert drain() == ["waiting"] * (count + 1)
    return parent, children_of(parent)


def approve(child: Workflow, decision: str) -> None:
    send_event(child, "approval", decision)


def test_start_children__starts_every_child_in_one_recorded_step_and_returns_outputs_in_order():
    parent = batch([{"n": n} for n in range(5)])
    drain()
    parent.refresh_from_db()
    assert (parent.status, parent.output_data) == ("completed", [0, 1, 4, 9, 16])
    steps = WorkflowStep.objects.filter(workflow_id=parent.pk).order_by("step_number")
    assert [step.step_name for step in steps] == ["start 5 children square", "wait for 5 children"]
    children = children_of(parent)
    assert [child.input_data for child in children] == [{"n": n} for n in range(5)]
    assert steps[0].output_data["workflow_ids"] == [str(child.pk) for child in children]


def test_start_children__a_replay_gets_the_same_children_back():
    parent, children = waiting_batch(3)
    Workflow.objects.filter(pk=parent.pk).update(run_after=None)  # woken early: it replays its steps
    assert drain() == ["waiting"]
    assert children_of(parent) == children


def test_start_children__inserts_the_children_in_one_statement_reading_back_only_how_many_are_new():
    parent = batch([{"n": n} for n in range(50)])
    with CaptureQueriesContext(connection) as queries:
        assert execute(claims.claim("w", None)[0]) == "waiting"
    inserts = [query["sql"] for query in queries if "INSERT INTO workflows" in query["sql"]]
    assert len(inserts) == 1
    read_back = re.search(r"\)\s*(SELECT .*)$", inserts[0].strip()).group(1)
    assert read_back == "SELECT count(*) FROM new LEFT JOIN wake ON true"
    started = WorkflowStep.objects.get(workflow_id=parent.pk, step_name="start 50 children square")
    assert started.output_data["workflow_ids"] == [str(child.pk) for child in children_of(parent)]


def test_start_children__run_again_after_its_checkpoint_was_lost__gets_the_children_it_inserted():
    parent, children = waiting_batch(3)
    WorkflowStep.objects.filter(workflow_id=parent.pk, step_name="start 3 children awaits_approval").delete()
    Workflow.objects.filter(pk=parent.pk).update(run_after=None)  # woken: it starts its children again
    assert drain() == ["waiting"]
    assert children_of(parent) == children
    started = WorkflowStep.objects.get(workflow_id=parent.pk, step_name="start 3 children awaits_approval")
    assert started.output_data["workflow_ids"] == [str(child.pk) for child in children]


def test_start_children__gives_every_child_the_options():
    parent = batch([{"n": 1}, {"n": 2}], options={"queue": "batch", "priority": 7, "detached": True})
    drain()
    children = children_of(parent)
    assert [(c.queue, c.priority, c.detached, c.parent_id) for c in children] == [("batch", 7, True, parent.pk)] * 2


def test_wait_for__the_parent_sleeps_until_its_last_child_ends():
    parent, (first, second, third) = waiting_batch(3)
    approve(first, "a")
    approve(second, "b")
    assert drain() == ["completed", "completed"]  # the children only
    parent.refresh_from_db()
    assert parent.status == "pending" and parent.run_after is not None
    approve(third, "c")
    assert drain() == ["completed", "completed"]  # the last child, then its parent
    parent.refresh_from_db()
    assert parent.output_data == [{"decision": "a"}, {"decision": "b"}, {"decision": "c"}]
    assert claims_of(parent) == 2


def test_wait_for__a_failed_child_wakes_its_parent_at_once_and_fails_it():
    parent, (first, _, _) = waiting_batch(3)
    cancel_workflow(first, "not needed")
    assert drain() == ["failed"]
    parent.refresh_from_db()
    assert f"ChildWorkflowFailed: Child workflow {first.pk} (awaits_approval) cancelled" in parent.error_message


def test_wait_for__a_failed_child_fails_its_parent_while_the_children_listed_before_it_still_run():
    parent, (_, _, last) = waiting_batch(3)
    cancel_workflow(last, "not needed")
    assert drain() == ["failed"]
    parent.refresh_from_db()
    assert f"ChildWorkflowFailed: Child workflow {last.pk} (awaits_approval) cancelled" in parent.error_message


def test_wait_for__return_exceptions__waits_for_every_child_and_returns_failures_in_their_place():
    parent, (first, second, third) = waiting_batch(3, return_exceptions=True)
    cancel_workflow(second, "not needed")
    assert drain() == [], "a failure does not end a wait that returns exceptions"
    approve(first, "a")
    approve(third, "c")
    assert drain() == ["completed", "completed", "completed"]
    parent.refresh_from_db()
    assert parent.output_data == [{"decision": "a"}, {"failed": "cancelled"}, {"decision": "c"}]
    assert claims_of(parent) == 2


def test_wait_for__return_exceptions__a_replay_returns_the_same_failures():
    parent = batch([{"n": 2}, {"n": 3, "fail": True}], child="square_or_fail", return_exceptions=True)
    drain()
    parent.refresh_from_db()
    assert parent.output_data == [4, {"failed": "failed"}]
    fork = fork_workflow(parent, from_step=3)  # replays the two steps from their checkpoints
    drain()
    fork.refresh_from_db()
    assert (fork.status, fork.output_data) == ("completed", parent.output_data)


def wake_up_queries(children: int) -> int:
    """The queries of a parent's wake-up once its ``children`` completed."""
    parent = batch([{"n": n} for n in range(children)])
    assert execute(claims.claim("w", None)[0]) == "waiting"
    Workflow.objects.filter(parent=parent).update(status="completed", output_data=1)
    Workflow.objects.filter(pk=parent.pk).update(run_after=None)
    with CaptureQueriesContext(connection) as queries:
        assert execute(claims.claim("w", None)[0]) == "completed"
    return len(queries)


def test_wait_for__a_parent_of_many_children_wakes_in_as_few_queries_as_one_of_three():
    assert wake_up_queries(1_000) == wake_up_queries(3)


def test_async_wait_for__return_exceptions__returns_failures_in_their_place():
    parent = start_workflow("async_batch", {"inputs": [{"n": 2}, {"n": 3, "fail": True}]})
    drain()
    parent.refresh_from_db()
    assert (parent.status, parent.output_data) == ("completed", [4, {"failed": "failed"}])


def test_wait_for__a_wait_records_no_list_of_its_children__the_step_that_started_them_has_it():
    parent, _ = waiting_batch(3)
    wait = WorkflowStep.objects.get(workflow_id=parent.pk, step_name="wait for 3 children")
    assert (wait.status, wait.output_data) == ("pending", {})


def test_wait_for__a_wait_recorded_with_its_list_of_children__as_the_previous_release_did__still_ends():
    parent, children = waiting_batch(2)
    old_shape = {"children": [str(child.pk) for child in children]}
    WorkflowStep.objects.filter(workflow_id=parent.pk, step_name="wait for 2 children").update(output_data=old_shape)
    approve(children[0], "a")
    approve(children[1], "b")
    assert drain() == ["completed", "completed", "completed"]
    parent.refresh_from_db()
    assert (parent.status, parent.output_data) == ("completed", [{"decision": "a"}, {"decision": "b"}])
    assert claims_of(parent) == 2


def peak_bytes(action: Any) -> int:
    """The most memory Python allocated at once while ``action`` ran, over what it held before."""
    tracemalloc.start()
    try:
        held, _ = tracemalloc.get_traced_memory()
        action()
        return tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()


def parent_peaks(children: int) -> tuple[int, int]:
    """The peak memory of the run of a parent of ``children`` children that
    starts them and waits, then of its wake-up once they completed (each
    output a small int: what the parent asked for is a list of ``children`` references)."""
    parent = batch([0] * children)
    first = peak_bytes(lambda: execute(claims.claim("w", None)[0]))
    Workflow.objects.filter(parent=parent).update(status="completed", output_data=1)
    Workflow.objects.filter(pk=parent.pk).update(run_after=None)
    woken = peak_bytes(lambda: execute(claims.claim("w", None)[0]))
    assert Workflow.objects.get(pk=parent.pk).output_data == [1] * children
    return first, woken


def test_wait_for__a_parent_of_many_children_holds_a_few_hundred_bytes_a_child_beyond_its_outcomes():
    parent_peaks(10)  # imports and caches, out of the figures
    (first_few, woken_few), (first_many, woken_many) = parent_peaks(200), parent_peaks(2_200)
    # Its handles (about 160 bytes each), the ids sent to the database and the list of outputs; no copy of the outcomes.
    assert (first_many - first_few) / 2_000 < 700
    assert (woken_many - woken_few) / 2_000 < 450

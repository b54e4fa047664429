"""pause_workflow / resume_workflow: a paused run is claimed by no worker, a
running one is given back at its step boundary with its steps kept, and what
it waits for while paused counts once it is resumed."""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from orchestration import (
    InvalidTransition,
    cancel_workflow,
    pause_workflow,
    recovery,
    resume_workflow,
    send_event,
    set_queue_limits,
    start_workflow,
)
from orchestration.claim import claims
from orchestration.claim.claims import FinishedRun
from orchestration.errors import RunPaused
from orchestration.models import Workflow, WorkflowStep
from orchestration.reports import stats
from orchestration.worker import execute
from tests.factories import WorkflowFactory
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db


def bodies(workflow: Workflow, step: int | None = None) -> int:
    runs = StepRun.objects.filter(workflow_id=workflow.pk)
    return (runs if step is None else runs.filter(step_number=step)).count()


def steps_of(workflow: Workflow) -> list[tuple[int, str]]:
    return list(WorkflowStep.objects.filter(workflow=workflow).values_list("step_number", "status"))


def test_pause_workflow__a_pending_run_is_paused_and_no_worker_claims_it():
    workflow = start_workflow("three_steps")
    assert pause_workflow(workflow).status == "paused"
    assert drain() == []
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.current_step) == ("paused", 0, 0)


def test_pause_workflow__accepts_an_id_as_text():
    workflow = start_workflow("three_steps")
    assert pause_workflow(str(workflow.pk)).status == "paused"


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_pause_workflow__refuses_a_finished_run_naming_its_status(status):
    workflow = WorkflowFactory(status=status)
    with pytest.raises(InvalidTransition, match=f"Cannot pause workflow {workflow.pk}: it is {status}"):
        pause_workflow(workflow)
    workflow.refresh_from_db()
    assert workflow.status == status


def test_pause_workflow__refuses_a_run_already_paused():
    workflow = pause_workflow(start_workflow("three_steps"))
    with pytest.raises(InvalidTransition, match="it is paused, and only a pending or running workflow can be"):
        pause_workflow(workflow)


def test_resume_workflow__a_paused_run_is_claimed_and_runs_to_its_end():
    workflow = pause_workflow(start_workflow("three_steps"))
    assert resume_workflow(workflow).status == "pending"
    assert drain() == ["completed"]


@pytest.mark.parametrize("status", ["pending", "running", "completed"])
def test_resume_workflow__refuses_a_run_that_is_not_paused(status):
    workflow = WorkflowFactory(status=status)
    with pytest.raises(InvalidTransition, match=f"Cannot resume workflow {workflow.pk}: it is {status}"):
        resume_workflow(workflow)


@pytest.mark.parametrize(
    "limits, keys_or_rates",
    [
        (None, None),  # plain
        ({"concurrency": 5}, False),  # counted, in its turn
        ({"concurrency": 1000}, False),  # counted, in a lane
        ({"rate_limit": "100/m"}, True),  # limited
    ],
    ids=["plain", "counted", "in-a-lane", "limited"],
)
def test_claim__no_variant_takes_a_paused_run_due_or_past_its_wait(limits, keys_or_rates):
    due = pause_workflow(start_workflow("three_steps"))
    past_its_wait = pause_workflow(start_workflow("three_steps"))
    Workflow.objects.filter(pk=past_its_wait.pk).update(run_after=timezone.now() - datetime.timedelta(minutes=1))
    if limits is not None:
        set_queue_limits("default", **limits)
    runs, _ = claims.finish_and_claim("w", None, [], 10, limits is not None, bool(keys_or_rates))
    assert runs == []
    assert set(Workflow.objects.values_list("status", flat=True)) == {"paused"}
    assert {due.pk, past_its_wait.pk} == set(Workflow.objects.values_list("pk", flat=True))


def test_claim__a_hand_over_takes_no_paused_run():
    set_queue_limits("default", concurrency=1)
    finishing = start_workflow("echo", 1)
    run = claims.claim("w", None)[0]
    paused = pause_workflow(start_workflow("echo", 2))
    runs, completed = claims.finish_and_claim(
        "w", None, [FinishedRun(run, '"done"', time.monotonic())], 1, True, False, limited_room=1
    )
    assert (runs, completed) == ([], {finishing.pk})
    paused.refresh_from_db()
    assert paused.status == "paused"


def test_pause__a_running_run_is_given_back_at_its_next_step_boundary_with_the_step_it_ran():
    workflow = start_workflow("pauses_itself", {"at": 2})
    assert drain() == ["paused"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.lease_token, workflow.current_step, workflow.attempts) == ("paused", None, 2, 0)
    assert steps_of(workflow) == [(1, "completed"), (2, "completed")]
    assert WorkflowStep.objects.get(workflow=workflow, step_number=2).output_data == {"step": 2, "label": "second"}


def test_resume__a_run_paused_while_it_ran_goes_on_after_its_last_completed_step():
    workflow = start_workflow("pauses_itself", {"at": 2})
    drain()
    resume_workflow(workflow)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == [1, 2, 3]
    assert [bodies(workflow, n) for n in (1, 2, 3)] == [1, 1, 1]


def test_pause__during_the_last_step_keeps_it_and_completes_once_resumed_without_running_it_again():
    workflow = start_workflow("pauses_itself", {"at": 3})
    assert drain() == ["paused"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step, workflow.output_data) == ("paused", 3, None)
    resume_workflow(workflow)
    assert drain() == ["completed"]
    assert bodies(workflow) == 3


@pytest.mark.parametrize("workflow_type", ["pauses_itself_then_reports", "async_pauses_itself_then_reports"])
def test_pause__a_step_that_reports_progress_after_it__runs_to_its_end_and_is_kept(monkeypatch, workflow_type):
    # Every report is written at once: the paused run's is written under its lease, not taken for a lost run.
    monkeypatch.setattr("orchestration.claim.lease.PROGRESS_INTERVAL", 0)
    workflow = start_workflow(workflow_type, {"at": 2})
    assert drain() == ["paused"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.lease_token, workflow.progress) == ("paused", None, {"done": 2, "total": 3})
    assert steps_of(workflow) == [(1, "completed"), (2, "completed")]
    resume_workflow(workflow)
    assert drain() == ["completed"]
    assert [bodies(workflow, n) for n in (1, 2, 3)] == [1, 1, 1]


def test_fenced_write__of_a_paused_run_raises_run_paused_and_writes_nothing():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    pause_workflow(workflow)
    with pytest.raises(RunPaused):
        run.start_step(2, "second")
    assert steps_of(workflow) == [(1, "running")]  # the claim's own record of step 1


def test_resume__before_the_worker_reached_its_step_boundary_lets_that_worker_go_on():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    pause_workflow(workflow)
    assert resume_workflow(workflow).status == "running"
    assert execute(run) == "completed"
    assert bodies(workflow) == 3


def test_pause__a_timer_that_passes_while_paused_counts_once_resumed():
    workflow = start_workflow("sleeper", {"seconds": 0.2})
    assert drain() == ["waiting"]
    pause_workflow(workflow)
    time.sleep(0.3)
    assert drain() == []
    resume_workflow(workflow)
    assert drain() == ["completed"]


def test_pause__an_event_that_arrives_while_paused_counts_once_resumed():
    workflow = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    pause_workflow(workflow)
    assert send_event(workflow, "approval", "yes").awaited
    assert drain() == []
    resume_workflow(workflow)
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"decision": "yes"}


def test_pause__a_child_that_finishes_while_its_parent_is_paused_counts_once_resumed():
    parent = start_workflow("fan_out", {"children": 1})
    assert execute(claims.claim("w", None)[0]) == "waiting"
    pause_workflow(parent)
    assert drain() == ["completed"]  # the child; its parent stays paused
    resume_workflow(parent)
    assert drain() == ["completed"]
    parent.refresh_from_db()
    assert parent.output_data == [0]


def test_cancel_workflow__ends_a_paused_run():
    workflow = pause_workflow(start_workflow("three_steps"))
    cancelled = cancel_workflow(workflow, "no longer needed")
    assert (cancelled.status, cancelled.error_message) == ("cancelled", "no longer needed")
    assert drain() == []


def test_cancel_workflow__of_a_run_paused_while_it_ran_stops_its_worker():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    pause_workflow(workflow)
    cancel_workflow(workflow)
    assert execute(run) == "abandoned"
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("cancelled", 0)


def test_heartbeat__keeps_a_run_paused_while_it_ran_held_until_its_worker_gives_it_back():
    workflow = start_workflow("three_steps")
    run = claims.claim("w", None)[0]
    pause_workflow(workflow)
    assert recovery.heartbeat([run]) == []
    assert execute(run) == "paused"
    assert recovery.heartbeat([run]) == [run]


def test_stuck_sweep__leaves_a_paused_run_alone():
    workflow = start_workflow("three_steps")
    claims.claim("w", None)
    pause_workflow(workflow)  # its worker never gives it back: it died
    Workflow.objects.filter(pk=workflow.pk).update(updated_at=timezone.now() - datetime.timedelta(hours=1))
    assert not recovery.reclaim_stuck(stuck_after=1)
    assert stats.stuck_workflows().rows == []  # the seed's stuck query
    workflow.refresh_from_db()
    assert workflow.status == "paused"


def test_resume__a_run_whose_worker_died_while_it_was_paused_is_claimed_again():
    workflow = start_workflow("three_steps")
    claims.claim("w", None)
    pause_workflow(workflow)  # its worker never gives it back: it died
    assert resume_workflow(workflow).status == "running"
    Workflow.objects.filter(pk=workflow.pk).update(updated_at=timezone.now() - datetime.timedelta(hours=1))
    assert recovery.reclaim_stuck(stuck_after=1).requeued == [workflow.pk]
    assert drain() == ["completed"]


def test_pause__an_async_run_is_given_back_at_its_step_boundary_and_resumes():
    workflow = start_workflow("async_three_steps")
    run = claims.claim("w", None)[0]
    pause_workflow(workflow)
    assert execute(run) == "paused"
    workflow.refresh_from_db()
    assert (workflow.status, workflow.lease_token) == ("paused", None)
    resume_workflow(workflow)
    assert drain() == ["completed"]
    assert bodies(workflow) == 3

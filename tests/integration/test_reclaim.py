"""The stuck-workflow sweep: recovery re-enqueues, it never executes."""

import pytest

from orchestration import recovery, start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStep, WorkflowWorker
from tests.factories import WorkflowWorkerFactory

pytestmark = pytest.mark.django_db


def claim_and_die(workflow, step_number=1):
    """A worker claims the workflow, starts a step, and dies (no more heartbeats)."""
    run = claims.claim("doomed-worker", None)[0]
    run.start_step(step_number, "first")
    Workflow.objects.filter(pk=workflow.pk).update(updated_at="2000-01-01T00:00:00Z")
    return run


def test_reclaim__sends_a_stuck_workflow_back_to_pending_as_a_spent_attempt():
    workflow = start_workflow("three_steps")
    run = claim_and_die(workflow)
    report = recovery.reclaim_stuck(stuck_after=60)
    assert report.requeued == [workflow.pk]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.attempts, workflow.lease_token) == ("pending", 1, None)
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert step.status == "failed" and step.error_message.startswith("worker lost")
    assert run.lease_token != workflow.lease_token


def test_reclaim__a_worker_marked_gone_has_its_runs_sent_back_in_the_same_sweep_though_their_heartbeat_is_younger():
    # The worker's row last beat before it claimed the run, then it died: its row
    # is silent past stuck_after while the run's last write (the claim) is not yet.
    worker = WorkflowWorkerFactory()
    WorkflowWorker.objects.filter(pk=worker.pk).update(last_seen_at="2000-01-01T00:00:00Z")
    workflow = start_workflow("three_steps")
    claims.claim(worker.pk, None)
    report = recovery.reclaim_stuck(stuck_after=60)
    assert report.workers_gone == [worker.pk] and report.requeued == [workflow.pk]
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"


def test_reclaim__leaves_workflows_with_a_recent_heartbeat_alone():
    start_workflow("three_steps")
    claims.claim("live-worker", None)
    assert not recovery.reclaim_stuck(stuck_after=60)
    assert Workflow.objects.get().status == "running"


def test_reclaim__fails_a_stuck_workflow_with_no_attempts_left():
    workflow = start_workflow("three_steps", max_retries=0)
    claim_and_die(workflow)
    assert recovery.reclaim_stuck(stuck_after=60).failed == [workflow.pk]
    workflow.refresh_from_db()
    assert workflow.status == "failed" and "no attempts left" in workflow.error_message


def test_reclaim__quarantines_a_workflow_whose_worker_died_at_the_same_step_repeatedly(settings):
    settings.ORCHESTRATION = {"MAX_WORKER_DEATHS": 3}
    workflow = start_workflow("three_steps", max_retries=10)
    for death in range(1, 4):
        claim_and_die(workflow)
        report = recovery.reclaim_stuck(stuck_after=60)
        workflow.refresh_from_db()
        assert workflow.worker_deaths == death
    assert report.quarantined == [workflow.pk]
    assert workflow.status == "failed" and workflow.error_message.startswith("Quarantined")


def test_reclaim__progress_resets_the_death_count():
    workflow = start_workflow("three_steps", max_retries=10)
    claim_and_die(workflow)
    recovery.reclaim_stuck(stuck_after=60)
    run = claims.claim("w", None)[0]
    run.start_step(1, "first")
    run.complete_step(1, {})
    workflow.refresh_from_db()
    assert (workflow.worker_deaths, workflow.lost_at_step) == (0, None)

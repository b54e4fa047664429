"""A parent blocked in ``ctx.wait_for`` is woken, and fails with
``ChildWorkflowFailed``, whichever way one of its children ends unsuccessfully."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestration import cancel_workflow, fork_workflow, send_event, start_workflow
from orchestration.api import requeue_stuck
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import drain, run_burst, start_workers, worker_env
from tests.testapp.models import StepRun

FAST_SWEEP = dict(ORCHESTRATION_STUCK_AFTER="2", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")


def children_of(parent: Workflow) -> list[Workflow]:
    return list(Workflow.objects.filter(parent=parent).order_by("idempotency_key"))


def waiting_family(children: int = 2) -> tuple[Workflow, list[Workflow]]:
    """A parent waiting for ``children`` children, each waiting for an event that never comes."""
    parent = start_workflow("fan_out", {"children": children, "child": "awaits_approval"})
    assert drain() == ["waiting"] * (children + 1)
    parent.refresh_from_db()
    assert parent.waiting_for.startswith("children:")
    return parent, children_of(parent)


def crashed_child(workers: list, **child_options: int) -> tuple[Workflow, Workflow]:
    """A parent waiting for one child whose step killed its worker process mid-run."""
    parent = start_workflow("fan_out", {"children": 1, "child": "crashes_worker", "child_options": child_options})
    first = start_workers("--concurrency", "1")
    workers.append(first)
    assert wait_for(lambda: first.poll() is not None, timeout=30), "the child kills its worker"
    (child,) = children_of(parent)
    assert (child.status, Workflow.objects.get(pk=parent.pk).status) == ("running", "pending")
    return parent, child


def assert_failed_for(parent: Workflow, child: Workflow, *words: str) -> None:
    parent.refresh_from_db()
    assert parent.status == "failed", (parent.status, parent.waiting_for)
    assert f"ChildWorkflowFailed: Child workflow {child.pk} ({child.workflow_type})" in parent.error_message
    for word in words:
        assert word in parent.error_message


@pytest.mark.django_db
def test_cancel_workflow__of_a_waiting_child_fails_its_waiting_parent():
    parent, (child, _) = waiting_family()
    cancel_workflow(child, "order withdrawn")
    assert drain() == ["failed"]
    assert_failed_for(parent, child, "cancelled", "order withdrawn")


@pytest.mark.django_db
def test_admin_cancel_action__of_a_waiting_child_fails_its_waiting_parent(admin_client):
    parent, (child, _) = waiting_family()
    response = admin_client.post(
        reverse("admin:orchestration_workflow_changelist"),
        {"action": "cancel_workflows", "_selected_action": [str(child.pk)], "index": 0, "confirmed": "yes"},
        follow=True,
    )
    assert "1 workflow(s) cancelled" in response.content.decode()
    assert drain() == ["failed"]
    assert_failed_for(parent, child, "cancelled")


@pytest.mark.django_db(transaction=True)
def test_cancel_workflow__of_a_running_child_fails_its_waiting_parent(workers):
    data = {"children": 1, "child": "slow", "child_input": {"seconds": 1.5, "steps": 5}}
    parent = start_workflow("fan_out", data)
    workers.append(start_workers("--concurrency", "2"))
    assert wait_for(lambda: StepRun.objects.filter(label="slow 1").exists())
    (child,) = children_of(parent)
    cancel_workflow(child, "taking too long")
    assert wait_for(lambda: Workflow.objects.get(pk=parent.pk).status == "failed", timeout=20)
    assert_failed_for(parent, child, "cancelled", "taking too long")


@pytest.mark.django_db(transaction=True)
def test_stuck_sweep__a_child_with_no_attempt_left_fails_its_waiting_parent(workers):
    parent, child = crashed_child(workers, max_retries=0)
    workers.append(start_workers("--concurrency", "1", env=worker_env(**FAST_SWEEP)))
    assert wait_for(lambda: Workflow.objects.get(pk=parent.pk).status == "failed", timeout=30)
    assert_failed_for(parent, child, "failed", "no attempts left")


@pytest.mark.django_db(transaction=True)
def test_stuck_sweep__a_quarantined_child_fails_its_waiting_parent(workers):
    parent, child = crashed_child(workers)
    env = worker_env(**FAST_SWEEP, ORCHESTRATION_MAX_WORKER_DEATHS="1")
    workers.append(start_workers("--concurrency", "1", env=env))
    assert wait_for(lambda: Workflow.objects.get(pk=parent.pk).status == "failed", timeout=30)
    assert_failed_for(parent, child, "failed", "Quarantined")


@pytest.mark.django_db(transaction=True)
def test_requeue_stuck__a_child_with_no_attempt_left_fails_its_waiting_parent(workers):
    parent, child = crashed_child(workers, max_retries=0)
    assert requeue_stuck(child, stuck_after=0).status == "failed"
    result = run_burst("--concurrency", "1")
    assert result.returncode == 0, result.stderr
    assert_failed_for(parent, child, "failed", "no attempts left")


@pytest.mark.django_db(transaction=True)
def test_fork__waiting_for_a_child_it_copied_is_woken_by_a_worker_when_the_child_completes(workers):
    original = start_workflow("fan_out", {"children": 1, "child": "awaits_approval"})
    workers.append(start_workers("--concurrency", "2"))
    assert wait_for(lambda: Workflow.objects.get(pk=original.pk).waiting_for == "children: 0 of 1 finished")
    fork = fork_workflow(original, from_step=2)
    cancel_workflow(original, "superseded by its fork")  # which leaves the child its fork shares running
    assert wait_for(lambda: Workflow.objects.get(pk=fork.pk).waiting_for == "children: 0 of 1 finished")
    (child,) = children_of(original)
    send_event(child, "approval", "yes")
    assert wait_for(lambda: Workflow.objects.get(pk=fork.pk).status == "completed", timeout=20)
    assert Workflow.objects.get(pk=fork.pk).output_data == [{"decision": "yes"}]

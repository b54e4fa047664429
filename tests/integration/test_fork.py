"""``fork_workflow``: a new run from another run's checkpoints, and its admin form."""

import uuid

import pytest
from django.urls import reverse

from orchestration import InvalidWorkflowInput, cancel_workflow, fork_workflow, send_event, start_workflow
from orchestration.models import Workflow, WorkflowStep
from tests.admin_support import failed_three_steps, staff_user
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import drain

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def steps_of(workflow: Workflow) -> list[tuple]:
    rows = WorkflowStep.objects.filter(workflow=workflow).order_by("step_number")
    return list(rows.values_list("step_number", "step_name", "status", "output_data"))


def test_fork__copies_the_steps_before_from_step_as_checkpoints_and_links_the_original():
    original = WorkflowFactory(status="completed", current_step=3, input_data={"order": 7}, queue="other", priority=4)
    for number in (1, 2, 3):
        WorkflowStepFactory(workflow=original, step_number=number)
    fork = fork_workflow(original, from_step=3)
    row = Workflow.objects.get(pk=fork.pk)
    assert (row.workflow_type, row.input_data, row.queue, row.priority) == ("three_steps", {"order": 7}, "other", 4)
    assert (row.status, row.current_step, row.forked_from_id) == ("pending", 2, original.pk)
    assert steps_of(row) == steps_of(original)[:2]
    assert len(steps_of(original)) == 3 and Workflow.objects.get(pk=original.pk).status == "completed"


def test_fork__keeps_the_patches_the_original_took_before_from_step():
    original = WorkflowFactory(status="completed", current_step=2, patches={"early": 1, "late": 2})
    WorkflowStepFactory(workflow=original, step_number=1)
    WorkflowStepFactory(workflow=original, step_number=2)
    assert fork_workflow(original.pk, from_step=2).patches == {"early": 1}
    assert Workflow.objects.get(forked_from=original, current_step=1).patches == {"early": 1}


@pytest.mark.parametrize("from_step", [0, -1, 3, 4, True, "2", None])
def test_fork__from_step_out_of_range_raises_and_writes_nothing(from_step):
    original = failed_three_steps()  # step 1 completed, step 2 failed: from_step 1 or 2
    with pytest.raises(InvalidWorkflowInput, match="from_step"):
        fork_workflow(original, from_step=from_step)
    assert Workflow.objects.count() == 1


def test_fork__an_unknown_run_raises_does_not_exist():
    with pytest.raises(Workflow.DoesNotExist):
        fork_workflow(uuid.uuid4(), from_step=1)


def test_fork_form__on_a_finished_runs_page_forks_it_and_opens_the_fork(client):
    original = failed_three_steps()
    client.force_login(staff_user("view_workflow", "retry_workflow"))
    page = client.get(reverse("admin:orchestration_workflow_change", args=[original.pk])).content.decode()
    assert 'id="orch-fork"' in page and 'max="2"' in page
    response = client.post(reverse("admin:orchestration_workflow_fork", args=[original.pk]), {"from_step": "2"})
    fork = Workflow.objects.get(forked_from=original)
    assert response.status_code == 302 and response.url == reverse(
        "admin:orchestration_workflow_change", args=[fork.pk]
    )
    page = client.get(response.url).content.decode()
    assert f'href="{reverse("admin:orchestration_workflow_change", args=[original.pk])}"' in page


def test_fork_form__needs_the_retry_permission(client):
    original = failed_three_steps()
    client.force_login(staff_user("view_workflow"))
    page = client.get(reverse("admin:orchestration_workflow_change", args=[original.pk])).content.decode()
    assert 'id="orch-fork"' not in page
    response = client.post(reverse("admin:orchestration_workflow_fork", args=[original.pk]), {"from_step": "2"})
    assert response.status_code == 403 and not Workflow.objects.filter(forked_from=original).exists()


def test_workflow_page__shows_the_patches_a_run_took(admin_client):
    workflow = WorkflowFactory(status="completed", patches={"charge-v2": 1, "ship-v3": 4})
    page = admin_client.get(reverse("admin:orchestration_workflow_change", args=[workflow.pk])).content.decode()
    assert "charge-v2 (before step 1), ship-v3 (before step 4)" in page


def fork_waiting_for_the_originals_child(*, cancel_original: bool) -> tuple[Workflow, Workflow, Workflow]:
    """A run waiting for its child (which waits for an event), and a fork of it
    from its wait (so it copied the step that started the child), waiting too."""
    original = start_workflow("fan_out", {"children": 1, "child": "awaits_approval"})
    assert drain() == ["waiting", "waiting"]
    child = Workflow.objects.get(parent=original)
    fork = fork_workflow(original, from_step=2)
    if cancel_original:  # which leaves the child its fork shares running
        cancel_workflow(original, "superseded by its fork")
    assert drain() == ["waiting"]
    assert Workflow.objects.get(pk=fork.pk).waiting_for == "children: 0 of 1 finished"
    return original, fork, child


def test_fork__waiting_for_a_child_it_copied_ends_with_its_original_when_the_child_completes():
    original, fork, child = fork_waiting_for_the_originals_child(cancel_original=False)
    send_event(child, "approval", "yes")
    assert sorted(drain()) == ["completed", "completed", "completed"]
    for run in (original, fork):
        run.refresh_from_db()
        assert (run.status, run.output_data) == ("completed", [{"decision": "yes"}])
    assert Workflow.objects.filter(workflow_type="awaits_approval").count() == 1  # shared, not started again


def test_fork__waiting_for_a_child_it_copied_ends_when_the_child_completes_after_the_original_was_cancelled():
    original, fork, child = fork_waiting_for_the_originals_child(cancel_original=True)
    send_event(child, "approval", "yes")
    assert drain() == ["completed", "completed"]
    fork.refresh_from_db()
    assert (fork.status, fork.output_data) == ("completed", [{"decision": "yes"}])
    assert Workflow.objects.get(pk=original.pk).status == "cancelled"


def test_fork__of_a_fork_waiting_for_the_child_they_copied_ends_when_the_child_completes():
    _, fork, child = fork_waiting_for_the_originals_child(cancel_original=True)
    cancel_workflow(fork, "superseded by its own fork")
    fork_of_fork = fork_workflow(fork, from_step=2)
    assert drain() == ["waiting"]
    send_event(child, "approval", "yes")
    assert drain() == ["completed", "completed"]
    assert Workflow.objects.get(pk=fork_of_fork.pk).status == "completed"


def test_fork__waiting_for_a_child_it_copied_fails_when_the_child_is_cancelled():
    _, fork, child = fork_waiting_for_the_originals_child(cancel_original=True)
    cancel_workflow(child, "order withdrawn")
    assert drain() == ["failed"]
    fork.refresh_from_db()
    assert fork.status == "failed"
    assert f"ChildWorkflowFailed: Child workflow {child.pk} (awaits_approval) cancelled" in fork.error_message


def test_fork__waiting_for_children_of_its_own_is_not_woken_by_the_originals_child():
    original = start_workflow("fan_out", {"children": 1, "child": "awaits_approval"})
    assert drain() == ["waiting", "waiting"]
    fork = fork_workflow(original, from_step=1)  # starts a child of its own
    assert drain() == ["waiting", "waiting"]
    send_event(Workflow.objects.get(parent=original), "approval", "yes")
    assert drain() == ["completed", "completed"]  # the child and the original
    assert Workflow.objects.get(pk=fork.pk).waiting_for == "children: 0 of 1 finished"

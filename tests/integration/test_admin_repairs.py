"""The step repairs on a workflow's page: retry from step N, skip a failed step with its output."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from orchestration.models import Workflow, WorkflowStep
from tests.admin_support import failed_three_steps, staff_user, stuck_running

pytestmark = pytest.mark.django_db


def retry_url(workflow: Workflow, number: int) -> str:
    return reverse("admin:orchestration_workflow_retry_from_step", args=[workflow.pk, number])


def skip_url(workflow: Workflow, number: int) -> str:
    return reverse("admin:orchestration_workflow_skip_step", args=[workflow.pk, number])


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


# -- retry from step N ------------------------------------------------------------


def test_retry_from_step_page__lists_the_checkpoints_it_will_discard(admin_client):
    workflow = failed_three_steps()
    response = admin_client.get(retry_url(workflow, 1))
    html = response.content.decode()
    assert response.status_code == 200
    assert "<li>step 1 first (completed)</li>" in html and "<li>step 2 second (failed)</li>" in html
    assert 'value="Retry from step 1"' in html
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"  # a GET changes nothing


def test_retry_from_step_page__posting_retries_from_that_step_and_logs_it(admin_client, admin_user):
    workflow = failed_three_steps()
    response = admin_client.post(retry_url(workflow, 1), follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:orchestration_workflow_change", args=[workflow.pk])
    assert messages_of(response) == [
        f"Workflow {workflow.pk} is pending again; it resumes at step 1 (first), "
        "which runs again with every later step."
    ]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("pending", 0)
    assert not WorkflowStep.objects.filter(workflow=workflow).exists()
    entry = LogEntry.objects.get(object_id=str(workflow.pk))
    assert (entry.user, entry.action_flag, entry.change_message) == (admin_user, CHANGE, "Retried from step 1 (first).")


def test_retry_from_step_page__a_workflow_that_runs_again_meanwhile_is_left_alone(admin_client):
    workflow = failed_three_steps()
    page = admin_client.get(retry_url(workflow, 2))
    assert page.status_code == 200
    Workflow.objects.filter(pk=workflow.pk).update(status="running")  # someone else retried it
    response = admin_client.post(retry_url(workflow, 2), follow=True)
    assert "it is running" in messages_of(response)[0]
    assert WorkflowStep.objects.filter(workflow=workflow).count() == 2
    assert not LogEntry.objects.exists()


def test_retry_from_step_page__explains_when_the_workflow_is_not_repairable(admin_client):
    workflow = stuck_running()
    html = admin_client.get(retry_url(workflow, 1)).content.decode()
    assert "Only a failed or cancelled workflow can be repaired" in html
    assert 'type="submit"' not in html.split('id="content-main"')[1]


def test_retry_from_step_page__of_a_step_that_does_not_exist_is_not_found(admin_client):
    workflow = failed_three_steps()
    assert admin_client.get(retry_url(workflow, 9)).status_code == 404
    assert (
        admin_client.get(reverse("admin:orchestration_workflow_retry_from_step", args=["nope", 1])).status_code == 404
    )


# -- skip a failed step ---------------------------------------------------------------


def test_skip_step_page__shows_the_step_error_and_a_json_form(admin_client):
    workflow = failed_three_steps()
    html = admin_client.get(skip_url(workflow, 2)).content.decode()
    assert "ConnectionError: bank API unreachable" in html
    assert '<textarea name="output"' in html and "resuming at step 3" in html


def test_skip_step_page__posting_json_completes_the_step_resumes_the_workflow_and_logs_it(admin_client):
    workflow = failed_three_steps()
    response = admin_client.post(skip_url(workflow, 2), {"output": '{"payout_id": "po_manual_1"}'}, follow=True)
    assert messages_of(response) == [
        f"Step 2 (second) recorded as completed; workflow {workflow.pk} is pending again and resumes at step 3."
    ]
    step = WorkflowStep.objects.get(workflow=workflow, step_number=2)
    assert (step.status, step.output_data) == ("completed", {"payout_id": "po_manual_1"})
    workflow.refresh_from_db()
    assert (workflow.status, workflow.current_step) == ("pending", 2)
    assert LogEntry.objects.get(object_id=str(workflow.pk)).change_message == (
        'Skipped failed step 2 (second) with output supplied by hand: {"payout_id": "po_manual_1"}'
    )


@pytest.mark.parametrize("output", ["null", '"done"', "42", "[1, 2]"])
def test_skip_step_page__any_json_value_is_an_output(admin_client, output):
    workflow = failed_three_steps()
    admin_client.post(skip_url(workflow, 2), {"output": output})
    assert WorkflowStep.objects.get(workflow=workflow, step_number=2).status == "completed"


@pytest.mark.parametrize(
    ("output", "error"),
    [("{not json", "Not valid JSON"), ("NaN", "NaN is not valid JSON"), ("", "This field is required")],
)
def test_skip_step_page__rejects_what_is_not_json_and_changes_nothing(admin_client, output, error):
    workflow = failed_three_steps()
    response = admin_client.post(skip_url(workflow, 2), {"output": output})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert WorkflowStep.objects.get(workflow=workflow, step_number=2).status == "failed"
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"


def test_skip_step_page__rejects_an_output_over_the_payload_limit(admin_client, settings):
    settings.ORCHESTRATION = {**settings.ORCHESTRATION, "MAX_PAYLOAD_BYTES": 20}
    workflow = failed_three_steps()
    response = admin_client.post(skip_url(workflow, 2), {"output": '"' + "x" * 50 + '"'})
    assert "over the 20-byte limit" in response.content.decode()
    assert Workflow.objects.get(pk=workflow.pk).status == "failed"


def test_skip_step_page__refuses_a_step_that_is_not_the_failed_one(admin_client):
    workflow = failed_three_steps()
    html = admin_client.get(skip_url(workflow, 1)).content.decode()
    assert "Only the failed step that follows the last completed one (step 2) can be skipped." in html
    response = admin_client.post(skip_url(workflow, 1), {"output": "{}"}, follow=True)
    assert "Cannot skip step 1" in messages_of(response)[0]
    assert WorkflowStep.objects.get(workflow=workflow, step_number=1).output_data == {"step": 1, "label": "first"}


# -- permissions ------------------------------------------------------------------------


@pytest.mark.parametrize("url", [retry_url, skip_url])
def test_step_repairs__staff_without_the_retry_permission_are_refused(client, url):
    workflow = failed_three_steps()
    client.force_login(staff_user("view_workflow", "cancel_workflow"))
    assert client.get(url(workflow, 2)).status_code == 403
    assert client.post(url(workflow, 2), {"output": "{}"}).status_code == 403
    workflow.refresh_from_db()
    assert workflow.status == "failed"
    assert WorkflowStep.objects.get(workflow=workflow, step_number=2).status == "failed"


def test_step_repairs__staff_with_the_retry_permission_may_use_them(client):
    workflow = failed_three_steps()
    client.force_login(staff_user("view_workflow", "retry_workflow"))
    client.post(skip_url(workflow, 2), {"output": "{}"})
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"

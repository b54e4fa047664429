"""Pausing and resuming runs from the admin: a button on the run's page and a
list action each, guarded by the cancel permission."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from orchestration import pause_workflow, start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow
from tests.admin_support import staff_user
from tests.factories import WorkflowFactory

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:orchestration_workflow_changelist")


def change_url(workflow: Workflow) -> str:
    return reverse("admin:orchestration_workflow_change", args=[workflow.pk])


def action_url(workflow: Workflow, action: str) -> str:
    return reverse("admin:orchestration_workflow_run_action", args=[workflow.pk, action])


def summary_of(client, workflow: Workflow) -> str:
    html = client.get(change_url(workflow)).content.decode()
    return html.split('id="orch-summary"', 1)[1].split("</section>", 1)[0]


def status_of(workflow: Workflow) -> str:
    return Workflow.objects.values_list("status", flat=True).get(pk=workflow.pk)


def list_action(client, action: str, *workflows: Workflow):
    selected = [str(w.pk) for w in workflows]
    return client.post(LIST_URL, {"action": action, "_selected_action": selected, "index": 0}, follow=True)


def test_run_page__a_pending_run_has_a_pause_button_that_pauses_it_and_logs_who(admin_client):
    workflow = start_workflow("three_steps")
    assert f'formaction="{action_url(workflow, "pause")}"' in summary_of(admin_client, workflow)
    response = admin_client.post(action_url(workflow, "pause"), follow=True)
    assert response.redirect_chain[-1][0] == change_url(workflow)
    assert status_of(workflow) == "paused"
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(f"Workflow {workflow.pk} is paused")
    assert LogEntry.objects.get(object_id=str(workflow.pk)).change_message == "Pause from its page."


def test_run_page__a_paused_run_says_so_and_has_resume_and_cancel_but_no_pause(admin_client):
    workflow = pause_workflow(start_workflow("three_steps"))
    head = summary_of(admin_client, workflow)
    assert "Paused; no worker claims it until it is resumed." in head
    assert f'formaction="{action_url(workflow, "resume")}"' in head
    assert f'formaction="{action_url(workflow, "cancel")}"' in head
    assert f'formaction="{action_url(workflow, "pause")}"' not in head
    admin_client.post(action_url(workflow, "resume"))
    assert status_of(workflow) == "pending"


def test_run_page__a_run_paused_while_it_runs_says_its_worker_gives_it_back(admin_client):
    workflow = start_workflow("three_steps")
    claims.claim("host:1:ab", None)
    pause_workflow(workflow)
    assert "gives it back at its next step boundary" in summary_of(admin_client, workflow)


def test_run_page__pause_of_a_finished_run_says_why_and_changes_nothing(admin_client):
    workflow = WorkflowFactory(status="completed")
    response = admin_client.post(action_url(workflow, "pause"), follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert message == (
        f"Cannot pause workflow {workflow.pk}: it is completed, and only a pending or running workflow can be."
    )
    assert status_of(workflow) == "completed"


def test_run_page__pause_and_resume_need_the_cancel_permission(client):
    pending = start_workflow("three_steps")
    paused = pause_workflow(start_workflow("three_steps"))
    client.force_login(staff_user("view_workflow", "retry_workflow"))
    assert "orch-run-pause" not in summary_of(client, pending)
    assert client.post(action_url(pending, "pause")).status_code == 403
    assert client.post(action_url(paused, "resume")).status_code == 403
    assert (status_of(pending), status_of(paused)) == ("pending", "paused")


def test_list_actions__pause_the_pending_and_running_and_skip_the_finished(admin_client):
    pending, running = start_workflow("three_steps"), start_workflow("three_steps")
    Workflow.objects.filter(pk=running.pk).update(status="running")
    finished = WorkflowFactory(status="failed")
    response = list_action(admin_client, "pause_workflows", pending, running, finished)
    assert [status_of(w) for w in (pending, running, finished)] == ["paused", "paused", "failed"]
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(
        "2 workflow(s) paused; 1 skipped (in the wrong state: only pending or running ones can be)."
    )


def test_list_actions__resume_the_paused_and_skip_the_others(admin_client):
    paused = pause_workflow(start_workflow("three_steps"))
    pending = start_workflow("three_steps")
    response = list_action(admin_client, "resume_workflows", paused, pending)
    assert (status_of(paused), status_of(pending)) == ("pending", "pending")
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("1 workflow(s) resumed; 1 skipped (in the wrong state: only paused ones can be).")


def test_status_filter__offers_paused_with_its_count(admin_client):
    pause_workflow(start_workflow("three_steps"))
    response = admin_client.get(LIST_URL, {"status__exact": "paused"})
    assert len(response.context["cl"].result_list) == 1
    assert "paused (1)" in response.content.decode()

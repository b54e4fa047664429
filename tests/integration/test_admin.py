"""The workflow list, the workflow page and the list actions, through Django's test client."""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from orchestration import moments
from orchestration.models import Workflow, WorkflowStep, WorkflowWorker
from orchestration.reports.pagination import EstimatedCountPaginator
from tests.admin_support import failed_three_steps, staff_user, stuck_running
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:orchestration_workflow_changelist")


def change_url(workflow: Workflow) -> str:
    return reverse("admin:orchestration_workflow_change", args=[workflow.pk])


def run_action(client, action: str, *workflows: Workflow, follow: bool = True, **confirmed: str):
    """Post ``action`` on ``workflows``; a cancel, confirmed (``confirmed="yes"``) or asking first."""
    return client.post(
        LIST_URL,
        {"action": action, "_selected_action": [str(w.pk) for w in workflows], "index": 0, **confirmed},
        follow=follow,
    )


def listed_ids(response) -> list[str]:
    return [str(workflow.pk) for workflow in response.context["cl"].result_list]


def status_of(workflow: Workflow) -> str:
    return Workflow.objects.values_list("status", flat=True).get(pk=workflow.pk)


# -- the list --------------------------------------------------------------------


@pytest.mark.moments
def test_workflow_list__shows_short_id_badge_progress_last_error_age_and_duration(admin_client):
    failed = failed_three_steps(max_retries=3)
    response = admin_client.get(LIST_URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert '<span class="orch-badge orch-failed" title="ConnectionError: bank API unreachable">failed</span>' in html
    row = next(r for r in html.split("<tr") if str(failed.pk) in r)
    # The id's random end, the whole id on hover.
    assert f'<span class="orch-id" title="{failed.pk}">{str(failed.pk)[-8:]}</span>' in row
    assert "1 / 2" in row  # one completed step out of two seen
    assert "attempt 4 of 4" in row  # past the first, out of max_retries + 1
    assert "queue default" not in row  # the queue is said when it is another
    assert '<span class="orch-error-line" title="ConnectionError: bank API unreachable">' in row
    assert "9.0 s" in row  # duration
    zone = re.escape(f"{moments.local(timezone.now()):%Z}")
    assert re.search(
        rf'<time datetime="[^"]+" title="\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {zone}">\d+(\.\d)? (s|ms) ago</time>', row
    )
    assert "last heartbeat" not in html and "queue" not in [c for c in response.context["cl"].list_display]


def test_workflow_list__of_running_workflows_shows_their_heartbeat_red_when_stale(admin_client):
    stuck = stuck_running(seconds_since_heartbeat=600, workflow_type="echo")
    html = admin_client.get(LIST_URL, {"status__exact": "running"}).content.decode()
    stuck_row = next(r for r in html.split("<tr") if str(stuck.pk) in r)
    assert '<span class="orch-stale">10m 0s ago</span>' in stuck_row


def test_workflow_list__query_count_does_not_grow_with_the_rows_shown(admin_client):
    failed_three_steps()
    admin_client.get(LIST_URL)  # warm caches (content types, session)
    with CaptureQueriesContext(connection) as few:
        admin_client.get(LIST_URL)
    for _ in range(20):
        failed_three_steps()
    with CaptureQueriesContext(connection) as many:
        admin_client.get(LIST_URL)
    assert len(many.captured_queries) == len(few.captured_queries)


def test_workflow_list__never_counts_every_row(admin_client):
    WorkflowFactory.create_batch(3)
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(LIST_URL, {"status__exact": "pending"})
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the page counts its rows"
    # Each count is bounded: a subquery with a LIMIT, or a step count per listed row.
    assert all("LIMIT" in sql or '"workflow_steps"' in sql for sql in counts)


def test_workflow_list__says_about_when_the_count_is_an_estimate(admin_client, monkeypatch):
    monkeypatch.setattr(EstimatedCountPaginator, "exact_limit", 3)
    WorkflowFactory.create_batch(6)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflows")
    response = admin_client.get(LIST_URL)
    assert response.context["cl"].paginator.is_estimate
    assert response.context["cl"].result_count >= 4
    assert "about" in response.content.decode()


def test_workflow_list__counts_exactly_below_the_bound(admin_client):
    WorkflowFactory.create_batch(4)
    response = admin_client.get(LIST_URL)
    assert not response.context["cl"].paginator.is_estimate
    assert response.context["cl"].result_count == 4
    assert "about" not in response.content.decode().split('class="paginator"')[1]


@pytest.mark.moments
def test_workflow_list__filters_by_status_type_queue_and_created_date(admin_client):
    failed = failed_three_steps()
    echo = WorkflowFactory(workflow_type="echo", queue="other")
    old = WorkflowFactory(workflow_type="echo")
    Workflow.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=40))
    assert listed_ids(admin_client.get(LIST_URL, {"status__exact": "failed"})) == [str(failed.pk)]
    assert set(listed_ids(admin_client.get(LIST_URL, {"workflow_type": "echo"}))) == {str(echo.pk), str(old.pk)}
    assert listed_ids(admin_client.get(LIST_URL, {"queue": "other"})) == [str(echo.pk)]
    since = str(timezone.now() - datetime.timedelta(days=7))
    recent = listed_ids(admin_client.get(LIST_URL, {"created_at__gte": since}))
    assert str(old.pk) not in recent and str(echo.pk) in recent


def test_workflow_list__filters_offer_types_in_use_and_queues_known_or_served(admin_client):
    WorkflowFactory(workflow_type="from_sql_only", status="pending", queue="sql-queue")
    WorkflowWorker.objects.create(id="w:1:ab", host="w", pid=1, queues=["served-queue"], concurrency=1, version="x")
    response = admin_client.get(LIST_URL)
    html = response.content.decode()
    assert "?workflow_type=from_sql_only" in html  # in the table, registered by no app
    assert "?workflow_type=always_fails" not in html  # registered, no row: it would find nothing
    # Registered, and served by a worker; the pending rows are not read for them.
    assert "?queue=other" in html and "?queue=served-queue" in html
    assert "?queue=sql-queue" not in html


def test_workflow_list__searches_by_id_prefix_full_id_type_and_idempotency_key(admin_client):
    target = WorkflowFactory(idempotency_key="order-7")
    WorkflowFactory.create_batch(3, workflow_type="echo")
    assert listed_ids(admin_client.get(LIST_URL, {"q": str(target.pk)[:8]})) == [str(target.pk)]
    assert listed_ids(admin_client.get(LIST_URL, {"q": str(target.pk).upper()})) == [str(target.pk)]
    assert listed_ids(admin_client.get(LIST_URL, {"q": "order-7"})) == [str(target.pk)]
    assert len(listed_ids(admin_client.get(LIST_URL, {"q": "echo"}))) == 3
    assert listed_ids(admin_client.get(LIST_URL, {"q": "no such thing"})) == []


def test_workflow_list__filters_and_searches_by_tag(admin_client):
    tagged = WorkflowFactory(tags=["customer-42", "import"])
    WorkflowFactory(tags=["customer-7"])
    WorkflowFactory()
    response = admin_client.get(LIST_URL, {"tag": "customer-42"})
    assert listed_ids(response) == [str(tagged.pk)]
    assert "tagged customer-42" in response.content.decode()  # the filter says it is in use
    assert listed_ids(admin_client.get(LIST_URL, {"q": "customer-42"})) == [str(tagged.pk)]
    assert listed_ids(admin_client.get(LIST_URL, {"tag": "nobody"})) == []


def test_workflow_list__shows_a_bar_where_progress_has_done_and_total(admin_client):
    counted = WorkflowFactory(status="running", progress={"done": 40, "total": 100, "message": "resizing"})
    said = WorkflowFactory(status="running", progress={"message": "warming up"})
    html = admin_client.get(LIST_URL).content.decode()
    row = next(r for r in html.split("<tr") if str(counted.pk) in r)
    assert (
        '<progress class="orch-progress" max="100" value="40" title="40 of 100 (40%): resizing">40%</progress>' in row
    )
    assert "<progress" not in next(r for r in html.split("<tr") if str(said.pk) in r)


def test_workflow_page__shows_its_progress_message_and_its_tags_linked_to_the_list(admin_client):
    run = WorkflowFactory(
        status="running", tags=["customer-42"], progress={"done": 3, "total": 4, "message": "resizing"}
    )
    html = admin_client.get(change_url(run)).content.decode()
    assert '<span class="orch-progress-text">3 of 4 (75%): resizing</span>' in html
    assert f'<a class="orch-tag" href="{LIST_URL}?tag=customer-42">customer-42</a>' in html


def test_workflow_page__without_progress_has_no_progress_block(admin_client):
    html = admin_client.get(change_url(WorkflowFactory(status="running"))).content.decode()
    assert "orch-progress" not in html


def test_workflow_list__cannot_add_or_delete(admin_client):
    response = admin_client.get(LIST_URL)
    actions = [choice for choice, _ in response.context["action_form"].fields["action"].choices]
    assert "delete_selected" not in actions
    assert admin_client.get(reverse("admin:orchestration_workflow_add")).status_code == 403


# -- the workflow page -------------------------------------------------------------


def test_workflow_page__shows_pretty_json_error_steps_and_timeline(admin_client):
    workflow = failed_three_steps()
    response = admin_client.get(change_url(workflow))
    html = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'<pre class="orch-json">\{\n  &quot;\w+&quot;: ', html)  # indented
    assert "  &quot;order&quot;: 7" in html
    assert "ConnectionError: bank API unreachable" in html
    assert "Traceback (most recent call last)" in html
    bars = re.findall(
        r'class="orch-timeline-bar orch-(\w+)[^"]*" style="margin-left: ([\d.]+)%; width: ([\d.]+)%', html
    )
    assert [(status, float(left), float(width)) for status, left, width in bars] == [
        ("completed", 0.0, pytest.approx(22.22, abs=0.01)),
        ("failed", pytest.approx(22.22, abs=0.01), pytest.approx(77.78, abs=0.01)),
    ]
    steps = re.findall(r'<tr class="orch-step-row" data-step="(\d+)">', html)
    assert steps == ["1", "2"]
    assert "7.0 s" in html  # step 2's duration


def test_workflow_page__is_read_only(admin_client):
    workflow = failed_three_steps()
    html = admin_client.get(change_url(workflow)).content.decode()
    assert 'name="_save"' not in html
    assert admin_client.post(change_url(workflow), {"status": "completed"}).status_code == 403
    assert status_of(workflow) == "failed"


def test_workflow_page__offers_step_repairs_for_a_failed_workflow(admin_client):
    workflow = failed_three_steps()
    html = admin_client.get(change_url(workflow)).content.decode()
    retry_step_1 = reverse("admin:orchestration_workflow_retry_from_step", args=[workflow.pk, 1])
    skip_step_2 = reverse("admin:orchestration_workflow_skip_step", args=[workflow.pk, 2])
    skip_step_1 = reverse("admin:orchestration_workflow_skip_step", args=[workflow.pk, 1])
    assert retry_step_1 in html and skip_step_2 in html
    assert skip_step_1 not in html  # step 1 completed: nothing to skip


def test_workflow_page__offers_no_repair_while_the_workflow_runs(admin_client):
    workflow = stuck_running()
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "Retry from here" not in html and "Skip with output" not in html
    assert "so far" in html  # the running step's duration


def test_workflow_page__offers_no_repair_without_the_retry_permission(client):
    workflow = failed_three_steps()
    client.force_login(staff_user("view_workflow", "cancel_workflow"))
    response = client.get(change_url(workflow))
    assert response.status_code == 200
    assert "Retry from here" not in response.content.decode()


def test_workflow_page__cuts_a_huge_payload_with_a_note(admin_client):
    workflow = WorkflowFactory(input_data={"blob": "x" * 30_000})
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "Cut at 20000 of" in html


def test_workflow_page__of_an_unknown_id_redirects_with_a_message(admin_client):
    response = admin_client.get(
        reverse("admin:orchestration_workflow_change", args=["00000000-0000-0000-0000-000000000000"]), follow=True
    )
    assert "doesn\u2019t exist" in response.content.decode()


# -- actions -------------------------------------------------------------------------


def test_retry_action__retries_failed_and_cancelled_skips_others_and_logs_who(admin_client, admin_user):
    failed = failed_three_steps()
    cancelled = WorkflowFactory(status="cancelled")
    completed = WorkflowFactory(status="completed")
    response = run_action(admin_client, "retry_workflows", failed, cancelled, completed)
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(
        "2 workflow(s) retried; 1 skipped (in the wrong state: only failed or cancelled ones can be). Open "
    )
    # Links to where the runs are now: the failed filter the operator acted from no longer shows them.
    for workflow in (failed, cancelled):
        assert f'<a href="{reverse("admin:orchestration_workflow_change", args=[workflow.pk])}">' in message
    assert (status_of(failed), status_of(cancelled), status_of(completed)) == ("pending", "pending", "completed")
    assert WorkflowStep.objects.filter(workflow=failed, status="completed").count() == 1  # checkpoint kept
    entries = LogEntry.objects.filter(user=admin_user, action_flag=CHANGE)
    assert sorted(e.object_id for e in entries) == sorted([str(failed.pk), str(cancelled.pk)])
    assert {e.change_message for e in entries} == {"Retried from the admin."}


def test_restart_action__runs_finished_workflows_again_from_scratch(admin_client):
    failed = failed_three_steps()
    running = stuck_running()
    response = run_action(admin_client, "restart_workflows", failed, running)
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("1 workflow(s) restarted; 1 skipped (in the wrong state: only finished ones can be).")
    assert status_of(failed) == "pending" and not WorkflowStep.objects.filter(workflow=failed).exists()
    assert status_of(running) == "running"
    assert LogEntry.objects.get(object_id=str(failed.pk)).change_message == "Restarted from the admin."


def test_cancel_action__cancels_pending_and_running_only(admin_client):
    pending = WorkflowFactory(status="pending")
    running = stuck_running()
    failed = failed_three_steps()
    response = run_action(admin_client, "cancel_workflows", pending, running, failed, confirmed="yes")
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(
        "2 workflow(s) cancelled; 1 skipped (in the wrong state: only pending, running or paused ones can be)."
    )
    assert (status_of(pending), status_of(running), status_of(failed)) == ("cancelled", "cancelled", "failed")


def test_cancel_action__asks_first_saying_how_many_children_it_stops(admin_client):
    parent, finished = WorkflowFactory(status="running"), WorkflowFactory(status="completed")
    child = WorkflowFactory(parent=parent)
    WorkflowFactory(parent=child, status="running")
    WorkflowFactory(parent=parent, detached=True)
    response = run_action(admin_client, "cancel_workflows", parent, finished)
    page = response.content.decode()
    assert "Cancel 1 pending, running or paused workflow of the 2 selected?" in page
    assert "It also stops 2 unfinished child workflows (their children and theirs)" in page
    assert "The other 1 is finished" in page
    assert (status_of(parent), status_of(child)) == ("running", "pending")  # nothing changed yet
    confirmed = run_action(admin_client, "cancel_workflows", parent, finished, confirmed="yes")
    [message] = [str(m) for m in confirmed.context["messages"]]
    assert message.startswith("1 workflow(s) cancelled; 1 skipped")
    assert (status_of(parent), status_of(child)) == ("cancelled", "cancelled")


def test_run_page__its_cancel_button_asks_saying_how_many_children_it_stops(admin_client):
    parent = WorkflowFactory(status="running")
    WorkflowFactory(parent=parent)
    page = admin_client.get(reverse("admin:orchestration_workflow_change", args=[parent.pk])).content.decode()
    assert 'data-confirm="Cancel this workflow? It also stops 1 unfinished child workflow' in page
    lone = WorkflowFactory(status="pending")
    page = admin_client.get(reverse("admin:orchestration_workflow_change", args=[lone.pk])).content.decode()
    assert 'data-confirm="Cancel this workflow?"' in page


def test_requeue_stuck_action__requeues_only_running_workflows_without_a_heartbeat(admin_client):
    stuck = stuck_running(seconds_since_heartbeat=3600)
    alive = stuck_running(seconds_since_heartbeat=1)
    response = run_action(admin_client, "requeue_stuck_workflows", stuck, alive)
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(
        "1 workflow(s) requeued; 1 skipped (in the wrong state: only running ones with no heartbeat"
    )
    assert (status_of(stuck), status_of(alive)) == ("pending", "running")
    assert LogEntry.objects.get(object_id=str(stuck.pk)).change_message == "Requeued from the admin."


def test_actions__when_nothing_qualifies_the_message_is_a_warning(admin_client):
    completed = WorkflowFactory(status="completed")
    response = run_action(admin_client, "retry_workflows", completed)
    [message] = list(response.context["messages"])
    assert message.level_tag == "warning" and str(message).startswith("0 workflow(s) retried; 1 skipped")
    assert not LogEntry.objects.exists()


def test_actions__staff_without_permissions_see_none_and_cannot_run_them(client):
    failed = failed_three_steps()
    client.force_login(staff_user("view_workflow"))
    response = client.get(LIST_URL)
    assert response.status_code == 200
    assert "action_form" not in response.context or response.context["action_form"] is None
    response = run_action(client, "retry_workflows", failed)
    assert status_of(failed) == "failed"
    assert not LogEntry.objects.exists()


def test_actions__each_needs_its_own_permission(client):
    failed = failed_three_steps()
    pending = WorkflowFactory(status="pending")
    client.force_login(staff_user("view_workflow", "cancel_workflow"))
    choices = [c for c, _ in client.get(LIST_URL).context["action_form"].fields["action"].choices]
    assert choices == ["", "cancel_workflows", "pause_workflows", "resume_workflows"]
    run_action(client, "retry_workflows", failed)
    run_action(client, "restart_workflows", failed)
    assert status_of(failed) == "failed"
    run_action(client, "cancel_workflows", pending, confirmed="yes")
    assert status_of(pending) == "cancelled"


def test_actions__retry_permission_grants_retry_restart_and_requeue(client):
    client.force_login(staff_user("view_workflow", "retry_workflow"))
    WorkflowFactory()
    choices = [c for c, _ in client.get(LIST_URL).context["action_form"].fields["action"].choices]
    assert choices == ["", "retry_workflows", "restart_workflows", "requeue_stuck_workflows"]


def test_workflow_list__needs_the_view_permission(client):
    client.force_login(staff_user())
    assert client.get(LIST_URL).status_code == 403


def test_workflow_list__step_counts_come_from_steps_not_from_current_step(admin_client):
    workflow = WorkflowFactory(status="completed", current_step=0)  # a row written by hand, say
    for number in (1, 2, 3):
        WorkflowStepFactory(workflow=workflow, step_number=number)
    row = next(r for r in admin_client.get(LIST_URL).content.decode().split("<tr") if str(workflow.pk)[:8] in r)
    assert "3 / 3" in row


def test_cancel_action__confirmed_from_its_page_cancels_the_selection(admin_client):
    pending, other = WorkflowFactory(status="pending"), WorkflowFactory(status="pending")
    asked = run_action(admin_client, "cancel_workflows", pending)
    assert 'name="confirmed" value="yes"' in asked.content.decode()
    # The page's own form: the ids it carries, no "index" (Django's actions with a confirmation).
    confirmed = admin_client.post(
        LIST_URL, {"action": "cancel_workflows", "_selected_action": [str(pending.pk)], "confirmed": "yes"}, follow=True
    )
    assert "1 workflow(s) cancelled" in confirmed.content.decode()
    assert (status_of(pending), status_of(other)) == ("cancelled", "pending")


def test_cancel_action__across_every_page_counts_the_whole_selection(admin_client):
    parents = [WorkflowFactory(status="running") for _ in range(3)]
    WorkflowFactory(parent=parents[0])
    page = admin_client.post(
        f"{LIST_URL}?status__exact=running",  # the list's filter: the running parents, not the pending child
        {"action": "cancel_workflows", "_selected_action": [str(parents[0].pk)], "index": 0, "select_across": "1"},
    ).content.decode()
    assert "Cancel 3 pending, running or paused workflows of the 3 selected? It also stops 1 unfinished child" in page
    assert 'name="select_across" value="1"' in page

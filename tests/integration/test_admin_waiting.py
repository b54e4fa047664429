"""Waiting workflows in the console: the send-event form (a human approval),
the list's and the page's account of what a workflow waits for, the overview's count."""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

from orchestration import moments, start_workflow, waits
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowEvent
from orchestration.reports import stats
from orchestration.worker import execute
from tests.admin_support import failed_three_steps, staff_user, waiting_for_event
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = [pytest.mark.django_db, pytest.mark.moments]

LIST_URL = reverse("admin:orchestration_workflow_changelist")
OVERVIEW_URL = reverse("admin:orchestration_workflow_overview")


def change_url(workflow: Workflow) -> str:
    return reverse("admin:orchestration_workflow_change", args=[workflow.pk])


def send_url(workflow: Workflow) -> str:
    return reverse("admin:orchestration_workflow_send_event", args=[workflow.pk])


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def row_of(html: str, workflow: Workflow) -> str:
    return next(row for row in html.split("<tr") if str(workflow.pk)[:8] in row)


def sleeping(minutes: float = 30, **fields) -> Workflow:
    wake_at = timezone.now() + datetime.timedelta(minutes=minutes)
    return WorkflowFactory(
        workflow_type="sleeper",
        status="pending",
        current_step=1,
        waiting_for=f"timer: nap until {wake_at:%Y-%m-%d %H:%M:%S} UTC",
        run_after=wake_at,
        **fields,
    )


def waiting_for_children(finished: int, of: int) -> Workflow:
    return WorkflowFactory(
        workflow_type="fan_out",
        status="pending",
        waiting_for=f"children: {finished} of {of} finished",
        run_after=waits.WAIT_FOREVER,
    )


# -- the send-event form on a workflow's page -------------------------------------


def test_workflow_page__waiting_for_an_event_offers_to_send_it_with_the_name_filled_in(admin_client):
    workflow = waiting_for_event("manager approval")
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "Waiting for the event “manager approval”" in html
    form = html.split('id="orch-send-event"', 1)[1].split("</form>", 1)[0]
    assert f'action="{send_url(workflow)}"' in form
    assert re.search(r'<input type="text" name="name" value="manager approval"', form)
    assert '<textarea name="payload"' in form
    # The form stands outside the page's own (read-only) change form: forms do not nest.
    assert html.index('id="orch-send-event"') < html.index('id="workflow_form"')


@pytest.mark.parametrize(
    "make",
    [
        lambda: sleeping(),
        lambda: waiting_for_children(0, 2),
        lambda: WorkflowFactory(status="running"),
        lambda: WorkflowFactory(status="pending"),
        # Woken by its event already: a second approval would only queue a second event.
        lambda: waiting_for_event(woken=True),
    ],
    ids=["timer", "children", "running", "due", "woken"],
)
def test_workflow_page__an_unfinished_workflow_not_waiting_for_an_event_folds_the_form_away(admin_client, make):
    workflow = make()
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "Waiting for the event" not in html
    assert '<details class="module orch-send-event" id="orch-send-event">' in html
    folded = html.split('<details class="module orch-send-event"', 1)[1].split("</details>", 1)[0]
    assert '<input type="text" name="name"' in folded and '<textarea name="payload"' in folded
    assert html.index('id="workflow_form"') < html.index('id="orch-send-event"')


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_workflow_page__a_finished_workflow_offers_no_form(admin_client, status):
    workflow = WorkflowFactory(status=status)
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "orch-send-event" not in html and send_url(workflow) not in html


def test_send_event__wakes_the_waiting_workflow_which_then_finishes_with_the_payload(admin_client, admin_user):
    workflow = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    response = admin_client.post(
        send_url(workflow), {"name": "approval", "payload": '{"approved": true, "by": "grace"}'}, follow=True
    )
    assert response.redirect_chain[-1][0] == change_url(workflow)
    assert messages_of(response) == [
        f"Event 'approval' sent to workflow {workflow.pk}, which was waiting for it; the next free worker resumes it."
    ]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.run_after, workflow.waiting_for) == ("pending", None, "event: approval")
    assert "Waiting for the event" not in response.content.decode()  # woken: the form steps back
    entry = LogEntry.objects.get(object_id=str(workflow.pk))
    assert (entry.user, entry.action_flag) == (admin_user, CHANGE)
    assert entry.change_message == """Sent event 'approval' with payload {"approved": true, "by": "grace"}."""
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"decision": {"approved": True, "by": "grace"}}


def test_send_event__invalid_json_is_refused_and_nothing_is_sent(admin_client):
    workflow = waiting_for_event()
    response = admin_client.post(send_url(workflow), {"name": "approval", "payload": "{approved: yes"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Please correct the error below; nothing was sent." in html
    assert "Not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)" in html
    assert "{approved: yes</textarea>" in html  # what was typed is kept, to correct it
    assert not WorkflowEvent.objects.exists() and not LogEntry.objects.exists()
    assert Workflow.objects.get(pk=workflow.pk).run_after == moments.as_django(waits.WAIT_FOREVER)


@pytest.mark.parametrize(
    ("name", "payload", "error"),
    [
        ("approval", "NaN", "Not valid JSON: NaN is not valid JSON"),
        ("", "{}", "This field is required."),
        ("x" * 151, "{}", "Ensure this value has at most 150 characters (it has 151)."),
    ],
)
def test_send_event__refuses_what_send_event_could_not_store(admin_client, name, payload, error):
    workflow = waiting_for_event()
    html = admin_client.post(send_url(workflow), {"name": name, "payload": payload}).content.decode()
    assert error in html
    assert not WorkflowEvent.objects.exists()


def test_send_event__an_empty_payload_sends_null(admin_client):
    workflow = waiting_for_event()
    admin_client.post(send_url(workflow), {"name": "approval", "payload": "  "})
    assert WorkflowEvent.objects.get(workflow=workflow).payload is None


def test_send_event__another_name_to_a_running_workflow_is_kept_for_its_wait(admin_client):
    workflow = WorkflowFactory(status="running", workflow_type="awaits_approval")
    response = admin_client.post(send_url(workflow), {"name": "cancel request", "payload": "[1, 2]"}, follow=True)
    assert messages_of(response) == [
        f"Event 'cancel request' sent to workflow {workflow.pk}, which is not waiting for 'cancel request': "
        "it is kept until the workflow waits for it."
    ]
    event = WorkflowEvent.objects.get(workflow=workflow)
    assert (event.name, event.payload, event.consumed_by_step) == ("cancel request", [1, 2], None)


def test_send_event__a_name_other_than_the_awaited_one_says_what_the_workflow_waits_for(admin_client):
    workflow = waiting_for_event("approval")
    response = admin_client.post(send_url(workflow), {"name": "aproval", "payload": "true"}, follow=True)
    assert messages_of(response)[0].endswith("(it waits for 'approval' now).")
    assert Workflow.objects.get(pk=workflow.pk).run_after == moments.as_django(waits.WAIT_FOREVER)  # not woken


def test_send_event__to_a_workflow_that_finished_meanwhile_is_refused_with_a_message(admin_client):
    workflow = waiting_for_event()
    Workflow.objects.filter(pk=workflow.pk).update(status="cancelled")
    response = admin_client.post(send_url(workflow), {"name": "approval", "payload": "{}"}, follow=True)
    assert messages_of(response) == [f"Cannot send event 'approval' to workflow {workflow.pk}: it is cancelled."]
    assert not WorkflowEvent.objects.exists()


def test_send_event_page__shows_the_form_on_its_own_page_too(admin_client):
    workflow = waiting_for_event("approval")
    html = admin_client.get(send_url(workflow)).content.decode()
    assert "and waits for the event <strong>approval</strong>" in html
    assert re.search(r'<input type="text" name="name" value="approval"', html)


def test_send_event__a_user_without_the_retry_permission_can_neither_see_nor_send(client):
    workflow = waiting_for_event()
    client.force_login(staff_user("view_workflow", "cancel_workflow", username="viewer"))
    html = client.get(change_url(workflow)).content.decode()
    assert "orch-send-event" not in html
    assert client.get(send_url(workflow)).status_code == 403
    assert client.post(send_url(workflow), {"name": "approval", "payload": "{}"}).status_code == 403
    assert not WorkflowEvent.objects.exists()
    assert Workflow.objects.get(pk=workflow.pk).run_after == moments.as_django(waits.WAIT_FOREVER)


def test_send_event__a_user_with_the_retry_permission_can(client):
    workflow = waiting_for_event()
    client.force_login(staff_user("view_workflow", "retry_workflow", username="approver"))
    assert "Waiting for the event" in client.get(change_url(workflow)).content.decode()
    client.post(send_url(workflow), {"name": "approval", "payload": "{}"})
    assert Workflow.objects.get(pk=workflow.pk).run_after is None


def test_send_event__an_unknown_workflow_is_not_found(admin_client):
    missing = WorkflowFactory.build()
    assert admin_client.post(send_url(missing), {"name": "approval", "payload": "{}"}).status_code == 404


# -- the list ----------------------------------------------------------------------


def test_workflow_list__shows_what_a_waiting_workflow_waits_for_and_until_when(admin_client):
    event = waiting_for_event("manager approval")
    timeout_at = timezone.now() + datetime.timedelta(hours=2)
    with_timeout = waiting_for_event("approval", run_after=timeout_at)
    timer = sleeping(minutes=30)
    children = waiting_for_children(1, 3)
    html = admin_client.get(LIST_URL).content.decode()
    badge = '<span class="orch-badge orch-waiting" title="pending: waiting for {}">waiting</span>'

    row = row_of(html, event)
    assert badge.format("event: manager approval") in row
    assert '<span class="orch-why">event: manager approval</span><span class="orch-why">until woken</span>' in row
    row = row_of(html, with_timeout)
    assert f'<span class="orch-why">until <time datetime="{moments.local(timeout_at).isoformat()}">' in row
    row = row_of(html, timer)
    # The timer's own "until" is said once, from run_after.
    assert '<span class="orch-why">timer: nap</span>' in row
    assert f'until <time datetime="{moments.local(timer.run_after).isoformat()}">' in row
    assert '<span class="orch-why">children: 1 of 3 finished</span>' in row_of(html, children)


def test_workflow_list__a_run_no_worker_here_registers_says_it_waits_for_a_worker(admin_client):
    # Ten minutes old, it waits a minute (the longest) before its next claim: a list read
    # more than a second after the claim, on a loaded machine, still finds it waiting.
    created = timezone.now() - datetime.timedelta(minutes=10)
    unknown = WorkflowFactory(workflow_type="nobody_registers_this", created_at=created)
    drain()
    row = row_of(admin_client.get(LIST_URL).content.decode(), Workflow.objects.get(pk=unknown.pk))
    assert (
        '<span class="orch-why">worker: one that registers workflow type &#x27;nobody_registers_this&#x27;</span>'
        in row
    )
    filtered = admin_client.get(LIST_URL, {"pending": "worker"}).content.decode()
    assert str(unknown.pk) in filtered


def test_workflow_list__other_pending_workflows_say_why_they_are_pending(admin_client):
    due = WorkflowFactory(status="pending")
    retry_at = timezone.now() + datetime.timedelta(seconds=30)
    retrying = WorkflowFactory(status="pending", attempts=1, error_message="ConnectionError: down", run_after=retry_at)
    scheduled = WorkflowFactory(status="pending", run_after=timezone.now() + datetime.timedelta(days=1))
    woken = waiting_for_event("approval", woken=True)
    html = admin_client.get(LIST_URL).content.decode()
    badge = '<td class="field-status_label"><span class="orch-badge orch-pending" title="">pending</span></td>'
    assert badge in row_of(html, due)
    row = row_of(html, retrying)
    assert 'title="ConnectionError: down">pending</span><span class="orch-why">retrying</span>' in row
    assert f'at <time datetime="{moments.local(retry_at).isoformat()}">' in row
    assert '<span class="orch-why">scheduled</span>' in row_of(html, scheduled)
    row = row_of(html, woken)
    assert "orch-waiting" not in row and '<span class="orch-why">woken: event: approval</span>' in row


def test_workflow_list__pending_filter_splits_pending_workflows_by_why(admin_client):
    later = timezone.now() + datetime.timedelta(minutes=5)
    rows = {
        "due": WorkflowFactory(status="pending"),
        "due, timer over": sleeping(minutes=-1),
        "event": waiting_for_event(),
        "timer": sleeping(),
        "children": waiting_for_children(0, 2),
        "retrying": WorkflowFactory(status="pending", error_message="boom", run_after=later),
        "scheduled": WorkflowFactory(status="pending", run_after=later),
    }
    WorkflowFactory(status="running")
    failed_three_steps()

    labels = {workflow.pk: label for label, workflow in rows.items()}

    def listed(reason: str) -> set[str]:
        response = admin_client.get(LIST_URL, {"pending": reason})
        assert response.status_code == 200
        return {labels.get(workflow.pk, "another") for workflow in response.context["cl"].result_list}

    assert listed("due") == {"due", "due, timer over"}
    assert listed("waiting") == {"event", "timer", "children"}
    assert listed("event") == {"event"}
    assert listed("timer") == {"timer"}
    assert listed("children") == {"children"}
    assert listed("retrying") == {"retrying"}
    assert listed("scheduled") == {"scheduled"}
    html = admin_client.get(LIST_URL).content.decode()
    assert "By pending reason" in html and "?pending=waiting" in html


# -- the workflow page -----------------------------------------------------------


def test_workflow_page__says_what_it_waits_for_until_when_and_its_deadline(admin_client):
    deadline = timezone.now() + datetime.timedelta(days=7)
    timeout_at = timezone.now() + datetime.timedelta(days=3)
    workflow = waiting_for_event("manager approval", run_after=timeout_at, deadline=deadline)
    html = admin_client.get(change_url(workflow)).content.decode()
    waiting = html.split(">Waiting</h2>", 1)[1].split("</fieldset>", 1)[0]
    assert '<div class="readonly">event: manager approval</div>' in waiting
    # The until field says the moment alone (no "Until: until ..."), with its zone.
    assert f'<div class="readonly"><time datetime="{moments.local(timeout_at).isoformat()}">' in waiting
    assert "until <time" not in waiting and f" {moments.local(timeout_at):%Z}</time>" in waiting
    timing = html.split(">Timing</h2>", 1)[1].split("</fieldset>", 1)[0]
    assert f'<time datetime="{moments.local(deadline).isoformat()}">' in timing
    # Its waiting step shows as such, with what it waits for.
    step = html.split('<tr class="orch-step-row" data-step="1">', 1)[1].split("</tr>", 1)[0]
    assert "orch-badge orch-waiting" in step and "&quot;event&quot;: &quot;manager approval&quot;" in step


def test_workflow_page__waiting_until_woken_says_so_instead_of_the_year_9999(admin_client):
    workflow = waiting_for_event()
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "until woken (no time limit)" in html
    assert "9999" not in html


def test_workflow_page__a_workflow_that_waits_for_nothing_has_no_waiting_section(admin_client):
    html = admin_client.get(change_url(failed_three_steps())).content.decode()
    assert ">Waiting</h2>" not in html and ">Parent and children</h2>" not in html


def test_workflow_page__links_its_parent_and_counts_its_children_by_status(admin_client):
    parent = waiting_for_children(2, 4)
    kids = [WorkflowFactory(parent=parent, status=status) for status in ("completed", "completed", "pending", "failed")]
    WorkflowFactory(status="pending")  # another family
    html = admin_client.get(change_url(parent)).content.decode()
    family = html.split(">Parent and children</h2>", 1)[1].split("</fieldset>", 1)[0]
    base = f"{LIST_URL}?parent={parent.pk}"
    assert f'<a href="{base}">4 in all</a>' in family
    assert f'<a href="{base}&amp;status__exact=completed">2 completed</a>' in family
    assert f'<a href="{base}&amp;status__exact=pending">1 pending</a>' in family
    assert f'<a href="{base}&amp;status__exact=failed">1 failed</a>' in family
    listed = admin_client.get(LIST_URL, {"parent": str(parent.pk), "status__exact": "completed"})
    assert {w.pk for w in listed.context["cl"].result_list} == {kids[0].pk, kids[1].pk}
    assert f"children of {parent.pk}" in listed.content.decode()

    child_page = admin_client.get(change_url(kids[2])).content.decode()
    family = child_page.split(">Parent and children</h2>", 1)[1].split("</fieldset>", 1)[0]
    assert f'<a href="{change_url(parent)}">fan_out {parent.pk}</a>' in family


def test_workflow_list__a_parent_filter_that_is_not_an_id_is_refused_not_a_crash(admin_client):
    response = admin_client.get(LIST_URL, {"parent": "not-a-uuid"})
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_workflow_page__a_real_fan_out_shows_its_children(admin_client):
    parent = start_workflow("fan_out", {"children": 3})
    (run,) = claims.claim("test-worker", None)
    assert run.id == parent.pk and execute(run) == "waiting"
    html = admin_client.get(change_url(parent)).content.decode()
    assert "children: 0 of 3 finished" in html
    assert f'<a href="{LIST_URL}?parent={parent.pk}&amp;status__exact=pending">3 pending</a>' in html


# -- the overview -------------------------------------------------------------------


def test_waiting_counts__counts_waits_by_kind_leaving_out_those_already_woken():
    waiting_for_event()
    waiting_for_event("other", run_after=timezone.now() + datetime.timedelta(hours=1))
    waiting_for_event("woken", woken=True)
    sleeping()
    sleeping(minutes=-1)  # its timer is over: due
    waiting_for_children(0, 5)
    WorkflowFactory(status="pending")
    assert stats.waiting_counts() == {"timer": 1, "event": 2, "children": 1, "worker": 0}


def test_queue_depth__counts_waiting_workflows_apart_from_those_due_later():
    waiting_for_event()
    waiting_for_event("woken", woken=True)
    sleeping()
    WorkflowFactory(status="pending", run_after=timezone.now() + datetime.timedelta(hours=1))
    (row,) = stats.queue_depth().as_dicts()
    assert (row["due"], row["waiting"], row["scheduled"], row["running"]) == (1, 2, 1, 0)


def test_overview__counts_waiting_workflows_by_kind_next_to_queue_depth(admin_client):
    waiting_for_event(queue="emails")
    sleeping(queue="emails")
    sleeping(queue="default")
    waiting_for_children(0, 2)
    WorkflowFactory(status="pending", queue="emails")
    response = admin_client.get(OVERVIEW_URL)
    html = response.content.decode()
    depth = html.split('id="orch-depth"', 1)[1].split("</section>", 1)[0]
    emails = re.search(r"<tr><td><a href=\"[^\"]*queue=emails[^\"]*\">emails</a></td>(.*?)</tr>", depth).group(1)
    # due, waiting (linked to the list), later, running
    cells = re.findall(r'<td class="orch-num[^"]*">(?:<a href="([^"]*)">)?(\d+)', emails)
    assert [count for _, count in cells] == ["1", "2", "0", "0"]
    assert cells[1][0] == f"{LIST_URL}?queue=emails&amp;pending=waiting"
    waiting = depth.split('id="orch-waiting"', 1)[1]
    for kind, label, count in (
        ("timer", "a timer", 2),
        ("event", "an event", 1),
        ("children", "child workflows", 1),
        ("all", "any of these", 4),
    ):
        link = f"{LIST_URL}?pending={'waiting' if kind == 'all' else kind}"
        cells = f'<td><a href="{link}">{label}</a></td><td class="orch-num">{count}</td>'
        assert f'<tr class="orch-waiting-{kind}">{cells}</tr>' in waiting

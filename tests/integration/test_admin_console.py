"""The console's second pass (issue 17): search, filter counts, a run's page
that leads with what an operator does, and an overview that judges by what matters."""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from orchestration import moments, start_workflow
from orchestration.admin.views import needs_vacuum
from orchestration.models import Workflow, WorkflowWorker
from orchestration.reports import stats
from orchestration.reports.listing import ERROR_INDEX
from tests.admin_support import failed_three_steps, require_error_index, staff_user, waiting_for_event
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = [pytest.mark.django_db, pytest.mark.moments]

LIST_URL = reverse("admin:orchestration_workflow_changelist")
OVERVIEW_URL = reverse("admin:orchestration_workflow_overview")


def change_url(workflow: Workflow) -> str:
    return reverse("admin:orchestration_workflow_change", args=[workflow.pk])


def action_url(workflow: Workflow, action: str) -> str:
    return reverse("admin:orchestration_workflow_run_action", args=[workflow.pk, action])


def found(client, term: str) -> set[str]:
    return {str(workflow.pk) for workflow in client.get(LIST_URL, {"q": term}).context["cl"].result_list}


def summary_of(html: str) -> str:
    return html.split('id="orch-summary"', 1)[1].split("</section>", 1)[0]


# -- the list ------------------------------------------------------------------------


def test_search__the_8_characters_the_list_shows_find_one_run_of_many_started_together(admin_client):
    runs = [start_workflow("echo", {"n": n}) for n in range(7)]  # UUIDv7: the same first characters
    target = runs[3]
    assert found(admin_client, str(target.pk)[-8:]) == {str(target.pk)}
    assert found(admin_client, str(target.pk)[:8]) == {str(run.pk) for run in runs}  # the clock: all of them


def test_search__finds_part_of_a_type_name(admin_client):
    failed = failed_three_steps()
    other = WorkflowFactory(workflow_type="echo")
    assert found(admin_client, "three") == {str(failed.pk)}
    assert found(admin_client, "STEPS") == {str(failed.pk)}
    assert found(admin_client, "ech") == {str(other.pk)}


def test_search__finds_words_of_an_error_message(admin_client):
    require_error_index()
    failed = failed_three_steps()
    assert found(admin_client, "api unreach") == {str(failed.pk)}
    assert found(admin_client, "100%") == set()  # a LIKE wildcard is a character like any other


def test_search__leaves_error_messages_out_where_pg_trgm_made_no_index(admin_client):
    failed_three_steps()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {ERROR_INDEX}")  # undone with the test's transaction
    assert found(admin_client, "api unreach") == set()  # rather than a scan of every row


def test_status_filter__says_how_many_workflows_each_status_holds(admin_client):
    failed_three_steps()
    failed_three_steps()
    WorkflowFactory(status="completed")
    html = admin_client.get(LIST_URL).content.decode()
    assert "failed (2)</a>" in html and "completed (1)</a>" in html and "running (0)</a>" in html


# -- a run's page --------------------------------------------------------------------


def test_failed_run_page__leads_with_its_error_where_it_failed_and_its_repairs(admin_client):
    workflow = failed_three_steps()
    html = admin_client.get(change_url(workflow)).content.decode()
    head = summary_of(html)
    assert "Failed at step 2 (second) after 4 attempt(s)" in head
    assert "ConnectionError: bank API unreachable" in head
    assert f'formaction="{action_url(workflow, "retry")}"' in head
    assert f'formaction="{action_url(workflow, "restart")}"' in head
    assert "orch-run-cancel" not in head  # a failed run cannot be cancelled
    assert html.index('id="orch-summary"') < html.index("<fieldset")  # before the fields
    assert "1 completed; failed at step 2 (second)" in html  # not "current step: 1"


def test_run_page_retry_button__retries_logs_and_comes_back_to_the_run(admin_client, admin_user):
    workflow = failed_three_steps()
    response = admin_client.post(action_url(workflow, "retry"), follow=True)
    assert response.redirect_chain[-1][0] == change_url(workflow)
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith(f"Workflow {workflow.pk} is pending again")
    assert LogEntry.objects.get(object_id=str(workflow.pk)).change_message == "Retry from its page."


def test_run_page_buttons__are_guarded_by_the_permissions_of_the_actions(client):
    workflow = WorkflowFactory(status="pending")
    staff_user("view_workflow", "retry_workflow", username="retrier", password="pw")
    client.login(username="retrier", password="pw")
    head = summary_of(client.get(change_url(workflow)).content.decode())
    assert "orch-run-cancel" not in head and "orch-run-send-event" in head
    assert client.post(action_url(workflow, "cancel")).status_code == 403
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"


def test_waiting_run_page__says_what_it_waits_for_and_that_no_worker_holds_it(admin_client):
    workflow = waiting_for_event("approval", worker_id="host:1:ab", attempts=0)
    html = admin_client.get(change_url(workflow)).content.decode()
    assert "Waiting at step 1 (approval) for event: approval, until woken; it holds no worker meanwhile." in (
        summary_of(html)
    )
    assert "0 spent of 4 (a wait spends none)" in html
    assert "none (last run by" in html  # not its old worker as if it held it
    due_at = re.search(r'fieldBox field-run_after_at">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert due_at is not None and due_at.group(1) == "—"  # its run_after is the wait's limit, said above


def test_run_page__lists_the_errors_of_earlier_attempts_after_a_success(admin_client):
    workflow = start_workflow("flaky", {"succeed_on": 3})
    drain()
    html = admin_client.get(change_url(workflow)).content.decode()
    history = html.split('class="orch-error-history"', 1)[1].split("</ol>", 1)[0]
    assert history.count("<li>") == 2
    assert "flaky failure on attempt 2" in history and "attempt 1 · step 2" in history
    assert f" {moments.local(timezone.now()):%Z}</time>" in history


# -- the overview ------------------------------------------------------------------


def test_overview__success_counts_finished_runs_only_beside_failures_and_unfinished(admin_client):
    for status in ("completed", "pending", "pending", "failed"):
        WorkflowFactory(workflow_type="expense_approval", status=status)
    html = admin_client.get(OVERVIEW_URL).content.decode()
    row = next(r for r in html.split('id="orch-success"', 1)[1].split("<tr") if "expense_approval" in r)
    cells = [re.sub(r"<[^>]+>", "", "<td" + cell.split("</td>")[0]) for cell in row.split("<td")[1:]]
    assert cells[1:] == ["4", "2", "1", "1", "0", "50.0 %"]  # started, unfinished, completed, failed, cancelled


def test_overview__lists_recent_failures_and_live_workers(admin_client):
    workflow = failed_three_steps()
    WorkflowWorker.objects.create(id="web-1:42:cafe", host="web-1", pid=42, queues=None, concurrency=4, version="x")
    WorkflowWorker.objects.create(
        id="old:1:dead", host="old", pid=1, queues=None, concurrency=1, version="x", gone_at=timezone.now()
    )
    html = admin_client.get(OVERVIEW_URL).content.decode()
    failures = html.split('id="orch-failures"', 1)[1].split("</section>", 1)[0]
    assert str(workflow.pk)[-8:] in failures and "bank API unreachable" in failures
    workers = html.split('id="orch-workers"', 1)[1].split("</section>", 1)[0]
    assert "web-1:42:cafe" in workers and "every queue" in workers and "old:1:dead" not in workers


def test_workers_page__shows_each_workers_hung_step_bodies_and_restarts_in_one_column(admin_client):
    WorkflowWorker.objects.create(id="web-1:42:cafe", host="web-1", pid=42, concurrency=4, version="x")
    WorkflowWorker.objects.create(
        id="web-2:43:beef", host="web-2", pid=43, concurrency=4, version="x", abandoned_bodies=3, restarts=2
    )
    html = admin_client.get(reverse("admin:orchestration_workflowworker_changelist")).content.decode()
    assert html.count(">Hung / restarts<") == 1  # one heading
    cells = {
        worker: re.sub(r"<[^>]+>", "", row.split('class="field-hung_and_restarts">', 1)[1].split("</td>", 1)[0])
        for row in html.split("<tr")
        for worker in ("web-1:42:cafe", "web-2:43:beef")
        if worker in row
    }
    assert cells == {"web-1:42:cafe": "0 / 0", "web-2:43:beef": "3 / 2"}
    assert '<span class="orch-stale">3</span>' in html  # a hung body stands out
    page = admin_client.get(reverse("admin:orchestration_workflowworker_change", args=[quote("web-2:43:beef")]))
    fields = " ".join(re.sub(r"<[^>]+>", " ", page.content.decode()).split())
    assert "Hung step bodies: 3 Restarts: 2 " in fields


@pytest.mark.parametrize(
    ("dead", "dead_pct", "flagged"),
    [(2, 50.0, False), (9_999, 100.0, False), (50_000, 10.0, False), (10_000, 20.0, True)],
    ids=["a fresh table", "few dead tuples", "a small part of a big table", "many, and a large part"],
)
def test_table_health__is_flagged_for_dead_tuples_that_are_many_and_a_large_part(dead, dead_pct, flagged):
    assert needs_vacuum({"dead_tuples": dead, "dead_pct": dead_pct}) is flagged


def test_overview__flags_the_tables_that_need_a_vacuum(admin_client, monkeypatch):
    rows = [("workflows", 7, 7, 50.0), ("workflow_steps", 100_000, 40_000, 28.6)]
    columns = ["table_name", "live_tuples", "dead_tuples", "dead_pct", "last_autovacuum", "last_vacuum",
               "last_autoanalyze", "total_bytes"]  # fmt: skip
    report = stats.Report("Table health", columns, [(*row, None, None, None, 8192) for row in rows])
    monkeypatch.setattr(stats, "table_health", lambda: report)
    html = admin_client.get(OVERVIEW_URL).content.decode().split('id="orch-health"', 1)[1]
    assert html.count('class="orch-warn"') == 1 and "<td>workflow_steps</td>" in html.split("orch-warn", 1)[1][:80]


def test_overview__is_linked_from_the_site_index_and_times_say_their_zone(admin_client):
    assert OVERVIEW_URL in admin_client.get(reverse("admin:index")).content.decode()
    html = admin_client.get(OVERVIEW_URL).content.decode()
    assert f"(hours in {moments.local(timezone.now()):%Z})" in html


def test_run_page__every_moment_says_its_zone(admin_client):
    workflow = failed_three_steps(deadline=timezone.now() + datetime.timedelta(hours=1))
    html = admin_client.get(change_url(workflow)).content.decode()
    timing = html.split(">Timing</h2>", 1)[1].split("</fieldset>", 1)[0]
    zone = f" {moments.local(timezone.now()):%Z}</time>"
    assert timing.count("<time ") >= 4 and timing.count("<time ") == timing.count(zone)

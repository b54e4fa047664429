"""The overview page and the links that lead to it."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from orchestration.admin import views as admin_views
from orchestration.models import Workflow
from orchestration.reports import stats
from tests.admin_support import staff_user, stuck_running
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db

OVERVIEW_URL = reverse("admin:orchestration_workflow_overview")


def section(html: str, section_id: str) -> str:
    return html.split(f'id="{section_id}"', 1)[1].split("</section>", 1)[0]


@pytest.fixture
def busy_day():
    now = timezone.now()
    for status in ("completed", "completed", "completed", "failed"):
        workflow = WorkflowFactory(workflow_type="order_fulfilment", status=status, finished_at=now)
        WorkflowStepFactory(
            workflow=workflow,
            step_number=1,
            step_name="charge card",
            started_at=now - datetime.timedelta(seconds=3),
            completed_at=now - datetime.timedelta(seconds=1),
        )
    WorkflowFactory(status="pending", queue="emails")
    WorkflowFactory(status="pending", queue="emails", run_after=now + datetime.timedelta(hours=1))
    return stuck_running(seconds_since_heartbeat=900, workflow_type="crm_sync")


def test_overview__shows_the_three_seed_reports(admin_client, busy_day):
    response = admin_client.get(OVERVIEW_URL)
    html = response.content.decode()
    assert response.status_code == 200
    success = section(html, "orch-success")
    assert "?workflow_type=order_fulfilment" in success and "75.0 %" in success
    durations = section(html, "orch-durations")
    assert "charge card" in durations and "2.00" in durations
    stuck = section(html, "orch-stuck")
    change_url = reverse("admin:orchestration_workflow_change", args=[busy_day.pk])
    assert f'<a href="{change_url}">{busy_day.pk}</a>' in stuck and "15m 0s ago" in stuck


def test_overview__counts_a_cancelled_run_apart_from_the_success_rate(admin_client):
    WorkflowFactory(workflow_type="refund", status="completed")
    WorkflowFactory(workflow_type="refund", status="cancelled")
    WorkflowFactory(workflow_type="payout", status="cancelled")
    success = section(admin_client.get(OVERVIEW_URL).content.decode(), "orch-success")
    refund = re.search(r"refund</a></td>(.*?)</tr>", success).group(1)
    payout = re.search(r"payout</a></td>(.*?)</tr>", success).group(1)
    assert re.findall(r">([^<>]+)</td>", refund) == ["2", "0", "1", "0", "1", "100.0 %"]
    assert re.findall(r">([^<>]+)</td>", payout)[-2:] == ["1", "—"]  # no rate: nothing completed or failed


def test_overview__shows_queue_depth_by_queue_and_status(admin_client, busy_day):
    depth = section(admin_client.get(OVERVIEW_URL).content.decode(), "orch-depth")
    emails = re.search(r"<tr><td><a href=\"[^\"]*queue=emails[^\"]*\">emails</a></td>(.*?)</tr>", depth).group(1)
    assert re.findall(r'<td class="orch-num">(\d+)</td>', emails) == ["1", "1", "0"]


def test_overview__draws_completions_and_failures_per_hour(admin_client, busy_day):
    response = admin_client.get(OVERVIEW_URL)
    chart = response.context["chart"]
    assert len(chart.groups) == 24
    assert (chart.groups[-1].completed.value, chart.groups[-1].failed.value) == (3, 1)
    html = section(response.content.decode(), "orch-hourly")
    assert html.count('class="orch-bar orch-bar-completed"') == 24
    # 3 completed on a scale of 0 to 5, in a plot 140 units high.
    assert chart.y_max == 5
    assert re.search(r'class="orch-bar orch-bar-completed" x="[\d.]+" y="[\d.]+" width="[\d.]+" height="84.0"', html)
    assert "completed (3)" in html and "failed (1)" in html


def test_overview__shows_table_health_and_the_oldest_pending_workflow(admin_client, busy_day):
    html = section(admin_client.get(OVERVIEW_URL).content.decode(), "orch-health")
    assert "<td>workflows</td>" in html and "<td>workflow_steps</td>" in html
    assert "dead tuples" in html and "last autovacuum" in html
    assert re.search(r"Oldest pending workflow: <a href=\"/admin/orchestration/workflow/[0-9a-f-]+/change/\">", html)


def test_overview__with_nothing_to_report_says_so(admin_client):
    html = admin_client.get(OVERVIEW_URL).content.decode()
    assert "No workflow was started in the last 24 hours." in html
    assert "None: every running workflow has a live worker." in html
    assert "Every queue is empty." in html and "No workflow is pending." in html


def test_overview__lists_at_most_twenty_stuck_workflows_and_links_to_all(admin_client):
    for _ in range(admin_views.STUCK_ROWS_SHOWN + 2):
        stuck_running(seconds_since_heartbeat=900)
    html = section(admin_client.get(OVERVIEW_URL).content.decode(), "orch-stuck")
    assert f"Showing {admin_views.STUCK_ROWS_SHOWN} of {admin_views.STUCK_ROWS_SHOWN + 2}" in html
    url = re.search(r'href="([^"]*status__exact=running[^"]*)"', html).group(1).replace("&amp;", "&")
    listed = admin_client.get(url).context["cl"].result_list
    assert len(listed) == admin_views.STUCK_ROWS_SHOWN + 2
    assert [w.updated_at for w in listed] == sorted(w.updated_at for w in listed)  # oldest heartbeat first


def test_overview__a_report_that_runs_too_long_is_cancelled_and_the_rest_still_shows(
    admin_client, busy_day, monkeypatch
):
    def slow_report():
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    # Long enough for the other reports on a machine busy with other tests; the slow one takes 5.
    monkeypatch.setattr(admin_views, "REPORT_TIME_LIMIT", 1.0)
    monkeypatch.setattr(stats, "recent_step_durations", slow_report)
    response = admin_client.get(OVERVIEW_URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert "took longer than 1 seconds and was cancelled" in section(html, "orch-durations")
    assert "75.0 %" in section(html, "orch-success")


def test_overview__needs_the_view_permission(client):
    client.force_login(staff_user())
    assert client.get(OVERVIEW_URL).status_code == 403
    client.force_login(staff_user("view_workflow", username="viewer"))
    assert client.get(OVERVIEW_URL).status_code == 200


def test_overview__is_for_staff_only(client):
    assert client.get(OVERVIEW_URL).status_code == 302  # to the login page


def test_app_index_and_workflow_pages__link_to_the_overview(admin_client):
    workflow = WorkflowFactory()
    app_index = admin_client.get(reverse("admin:app_list", args=["orchestration"])).content.decode()
    assert f'href="{OVERVIEW_URL}"' in section_or_all(app_index, "orchestration-monitoring")
    assert (
        f'href="{OVERVIEW_URL}"'
        in admin_client.get(reverse("admin:orchestration_workflow_changelist")).content.decode()
    )
    change = reverse("admin:orchestration_workflow_change", args=[workflow.pk])
    assert f'href="{OVERVIEW_URL}"' in admin_client.get(change).content.decode()


def section_or_all(html: str, element_id: str) -> str:
    return html.split(f'id="{element_id}"', 1)[1]


def test_overview__survives_a_row_inserted_by_plain_sql(admin_client):
    with connections["default"].cursor() as cursor:
        cursor.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('from_sql', '{}')")
    assert admin_client.get(OVERVIEW_URL).status_code == 200
    assert Workflow.objects.filter(workflow_type="from_sql").exists()

"""The schedules in the admin: made, changed, paused and resumed by an operator
through the same API as code, every refusal a form error with nothing saved;
the code's schedules listed read-only but pausable; run now and backfill."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from orchestration import schedule, workflow
from orchestration.models import ScheduleTick, Workflow, WorkflowSchedule
from orchestration.schedules import Scheduler
from tests.admin_support import staff_user
from tests.factories import WorkflowScheduleFactory

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:orchestration_workflowschedule_changelist")
ADD_URL = reverse("admin:orchestration_workflowschedule_add")


def stock_input(data: Any) -> None:
    if not isinstance(data.get("sku"), str):
        raise ValueError("sku must be a string")


@workflow("stock_count", input=stock_input)
def stock_count(ctx: Any, data: Any) -> Any:
    return data


def change_url(row: WorkflowSchedule) -> str:
    return reverse("admin:orchestration_workflowschedule_change", args=[quote(row.pk)])


def form(**fields: str) -> dict[str, str]:
    return {
        "name": "nightly-stock",
        "workflow_type": "stock_count",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "input": '{"sku": "A-1"}',
        "missed_ticks": "latest",
        "enabled": "on",
        **fields,
    }


def test_schedule_admin__makes_a_schedule_through_the_api(admin_client):
    response = admin_client.post(ADD_URL, form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = WorkflowSchedule.objects.get(name="nightly-stock")
    assert (row.workflow_type, row.cron, row.timezone, row.input, row.enabled, row.from_code) == (
        "stock_count", "0 3 * * *", "Europe/Berlin", {"sku": "A-1"}, True, False
    )  # fmt: skip
    assert row.active_since is not None  # its ticks count from now, as schedule() counts them


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "at three"}, "cron", "'at three' is not a cron expression"),
        ({"workflow_type": "no_such_type"}, "workflow_type", "Unknown workflow type 'no_such_type'"),
        ({"timezone": "Mars/Olympus"}, "timezone", "'Mars/Olympus' is not a time zone"),
        ({"input": '{"sku": 7}'}, "input", "sku must be a string"),
        ({"input": ""}, "input", "its runs' input is refused"),
        ({"input": "{not json"}, "input", "Enter a valid JSON"),
    ],
)
def test_schedule_admin__a_refused_field_is_a_form_error_and_nothing_is_saved(admin_client, fields, field, message):
    response = admin_client.post(ADD_URL, form(**fields))
    assert response.status_code == 200
    assert message in " ".join(response.context["adminform"].form.errors[field])
    assert not WorkflowSchedule.objects.filter(from_code=False).exists()


def test_schedule_admin__a_refused_change_leaves_the_schedule_as_it_was(admin_client):
    row = schedule("nightly-stock", "stock_count", "0 3 * * *", input={"sku": "A-1"})
    response = admin_client.post(change_url(row), form(cron="0 3 * *"))
    assert response.status_code == 200
    row.refresh_from_db()
    assert row.cron == "0 3 * * *"
    admin_client.post(change_url(row), form(cron="0 4 * * *", enabled=""))
    row.refresh_from_db()
    assert (row.cron, row.enabled, row.name) == ("0 4 * * *", False, "nightly-stock")


def test_schedule_admin__lists_the_code_schedules_with_next_tick_and_last_run(admin_client):
    Scheduler().start_due_runs()  # monthly_bill's tick: its last run
    html = admin_client.get(LIST_URL).content.decode()
    row = WorkflowSchedule.objects.get(name="monthly_bill")
    cells = html.split(f'href="{change_url(row)}"', 1)[1].split("</tr>", 1)[0]
    run = ScheduleTick.objects.get(name="monthly_bill").workflow_id
    assert "the code (@workflow)" in cells and "0 0 1 * *" in cells
    assert reverse("admin:orchestration_workflow_change", args=[quote(run)]) in cells
    assert "<time" in cells.split("0 0 1 * *", 1)[1]  # the next tick


def test_schedule_admin__a_code_schedule_is_pausable_but_its_expression_read_only(admin_client):
    admin_client.get(LIST_URL)
    row = WorkflowSchedule.objects.get(name="monthly_bill")
    page = admin_client.get(change_url(row))
    assert set(page.context["adminform"].form.fields) == {"enabled"}
    admin_client.post(change_url(row), {"cron": "* * * * *"})  # enabled unticked: paused; the cron ignored
    row.refresh_from_db()
    assert (row.enabled, row.cron) == (False, "0 0 1 * *")
    assert not page.context["has_delete_permission"]


def test_schedule_admin__pause_resume_and_run_now_actions_need_the_change_permission(client):
    row = schedule("nightly-stock", "stock_count", "0 3 * * *", input={"sku": "A-1"})
    action = {"action": "pause_schedules", "_selected_action": [row.pk], "index": 0}
    client.force_login(staff_user("view_workflowschedule"))
    client.post(LIST_URL, action)
    assert WorkflowSchedule.objects.get(name="nightly-stock").enabled
    client.force_login(staff_user("view_workflowschedule", "change_workflowschedule", username="ops"))
    client.post(LIST_URL, action)
    assert not WorkflowSchedule.objects.get(name="nightly-stock").enabled
    client.post(LIST_URL, {**action, "action": "resume_schedules"})
    assert WorkflowSchedule.objects.get(name="nightly-stock").enabled
    client.post(LIST_URL, {**action, "action": "run_schedules_now"})
    assert Workflow.objects.get().input_data == {"sku": "A-1"}


def test_schedule_admin__run_now_button_starts_one_run(admin_client):
    row = schedule("nightly-stock", "stock_count", "0 3 * * *", input={"sku": "A-1"})
    page = admin_client.get(change_url(row)).content.decode()
    url = reverse("admin:orchestration_workflowschedule_run_now", args=[quote(row.pk)])
    assert f'action="{url}"' in page
    admin_client.post(url)
    [run] = Workflow.objects.all()
    assert (run.workflow_type, ScheduleTick.objects.get(name="nightly-stock").workflow_id) == ("stock_count", run.pk)


def test_schedule_admin__backfill_starts_the_ticks_between_two_moments_once(admin_client):
    row = WorkflowScheduleFactory(name="hourly")
    url = reverse("admin:orchestration_workflowschedule_backfill", args=[quote(row.pk)])
    moments = {"start_0": "2026-01-01", "start_1": "00:30:00", "end_0": "2026-01-01", "end_1": "03:00:00"}
    response = admin_client.post(url, moments, follow=True)
    assert "3 run(s) started, 0 tick(s) already had one" in response.content.decode()
    admin_client.post(url, moments)
    assert Workflow.objects.count() == 3


def test_schedule_admin__a_backfill_too_long_is_a_form_error_and_starts_nothing(admin_client):
    row = WorkflowScheduleFactory(name="hourly")
    url = reverse("admin:orchestration_workflowschedule_backfill", args=[quote(row.pk)])
    assert "At most 1000 ticks at once" in admin_client.get(url).content.decode()
    start = datetime.date(2020, 1, 1).isoformat()
    response = admin_client.post(url, {"start_0": start, "start_1": "00:00", "end_0": "2026-01-01", "end_1": "00:00"})
    assert "more than 1000 times" in response.content.decode()
    assert not Workflow.objects.exists()

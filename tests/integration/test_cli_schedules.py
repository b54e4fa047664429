"""``manage.py workflows schedules list|pause|resume|run-now``: the cron
schedules from a shell, as the admin's list of schedules shows and changes them."""

from __future__ import annotations

import datetime
import io
import json
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command

from orchestration import schedule
from orchestration.models import Workflow, WorkflowSchedule

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", "schedules", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def listed(name: str) -> dict:
    return next(row for row in json.loads(run("list", "--json")) if row["name"] == name)


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as raised:
        call_command("workflows", "schedules", *args, stdout=io.StringIO(), stderr=io.StringIO())
    return raised.value


def test_list__shows_each_schedule_with_its_next_tick_and_state():
    schedule("eu-report", "echo", "0 6 * * *", input={"region": "eu"}, timezone="Europe/Berlin")
    row = listed("eu-report")
    assert (row["workflow_type"], row["cron"], row["timezone"], row["enabled"]) == (
        "echo", "0 6 * * *", "Europe/Berlin", True,
    )  # fmt: skip
    tick = datetime.datetime.fromisoformat(row["next_tick"])
    assert (tick.astimezone(ZoneInfo("Europe/Berlin")).hour, tick.minute) == (6, 0)
    assert row["last_run"] is None
    line = next(line for line in run("list").splitlines() if line.startswith("eu-report"))
    assert "echo" in line and "enabled" in line and "operator" in line


def test_pause_and_resume__change_the_schedules_named_and_a_paused_one_has_no_next_tick():
    schedule("eu-report", "echo", "0 6 * * *", input={"region": "eu"})
    schedule("us-report", "echo", "0 7 * * *", input={"region": "us"})
    assert run("pause", "eu-report", "us-report") == "eu-report: paused\nus-report: paused\n"
    assert not WorkflowSchedule.objects.filter(enabled=True, name__in=["eu-report", "us-report"]).exists()
    assert listed("eu-report")["next_tick"] is None
    assert json.loads(run("resume", "eu-report", "--json")) == [{"name": "eu-report", "ok": True, "enabled": True}]
    assert listed("eu-report")["next_tick"] is not None


def test_run_now__starts_one_run_that_the_list_shows_as_the_last_run():
    schedule("eu-report", "echo", "0 6 * * *", input={"region": "eu"}, enabled=False)
    out = run("run-now", "eu-report")
    run_row = Workflow.objects.get(workflow_type="echo")
    assert out == f"eu-report: started a run {run_row.pk}\n"
    assert run_row.input_data == {"region": "eu"}
    assert listed("eu-report")["last_run"] == str(run_row.pk)


def test_an_unknown_name__exits_3_after_changing_the_others():
    schedule("eu-report", "echo", "0 6 * * *", input={"region": "eu"})
    error = refused("pause", "eu-report", "nope")
    assert error.returncode == 3 and "1 of 2 schedule(s) not paused" in str(error)
    assert WorkflowSchedule.objects.get(name="eu-report").enabled is False


@pytest.mark.parametrize(("args", "message"), [(("list", "eu-report"), "takes no names"), (("pause",), "needs")])
def test_names_where_none_are_taken_or_none_where_they_are_needed__are_a_bad_argument(args, message):
    error = refused(*args)
    assert error.returncode == 2 and message in str(error)

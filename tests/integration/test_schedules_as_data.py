"""Schedules as rows: ``orchestration.schedule`` and its pause and resume, each
refusing bad input with nothing stored; the scheduler's passes over the rows,
in their time zones and across daylight-saving nights; run now and backfill."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest
from django.db import connection

from orchestration import (
    InvalidSchedule,
    InvalidWorkflowInput,
    UnknownSchedule,
    UnknownWorkflowType,
    pause_schedule,
    resume_schedule,
    schedule,
    workflow,
)
from orchestration.models import MissedTicks, ScheduleTick, Workflow, WorkflowSchedule
from orchestration.schedules import Scheduler
from orchestration.schedules.api import backfill, run_now
from tests.factories import WorkflowScheduleFactory

pytestmark = pytest.mark.django_db

UTC = datetime.UTC


def region_report_input(data: Any) -> None:
    if data.get("region") not in ("eu", "us"):
        raise ValueError(f"region must be 'eu' or 'us', not {data.get('region')!r}")


@workflow("region_report", input=region_report_input)
def region_report(ctx: Any, data: Any) -> Any:
    return data


def at(*parts: int) -> datetime.datetime:
    return datetime.datetime(*parts, tzinfo=UTC)


def runs_of(name: str) -> list[Workflow]:
    return list(Workflow.objects.filter(idempotency_key__startswith=f"schedule:{name}:").order_by("created_at"))


def ticked(name: str) -> list[str]:
    """The ticks of ``name``'s runs, in the order they came (their keys hold them in UTC)."""
    return [run.input_data["scheduled_for"] for run in sorted(runs_of(name), key=lambda run: run.idempotency_key)]


def passes(scheduler: Scheduler, start: datetime.datetime, end: datetime.datetime, every: datetime.timedelta) -> None:
    while start <= end:
        scheduler.start_due_runs(now=start)
        start += every


# -- the API ------------------------------------------------------------------------


def test_schedule__makes_a_row_and_returns_it():
    row = schedule("eu-report", "region_report", "0 6 * * *", input={"region": "eu"}, timezone="Europe/Berlin")
    assert (row.name, row.workflow_type, row.cron, row.timezone, row.input, row.enabled, row.from_code) == (
        "eu-report", "region_report", "0 6 * * *", "Europe/Berlin", {"region": "eu"}, True, False
    )  # fmt: skip
    assert WorkflowSchedule.objects.get(name="eu-report").pk == row.pk


def test_schedule__of_a_name_already_made_changes_it_to_what_the_call_says():
    schedule("eu-report", "region_report", "0 6 * * *", input={"region": "eu"})
    row = schedule("eu-report", "region_report", "0 7 * * *", input={"region": "us"}, enabled=False)
    assert (row.cron, row.input, row.enabled) == ("0 7 * * *", {"region": "us"}, False)
    assert WorkflowSchedule.objects.filter(name="eu-report").count() == 1


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"cron": "every morning"}, InvalidSchedule, "'every morning' is not a cron expression"),
        ({"workflow_type": "no_such_type"}, UnknownWorkflowType, "Unknown workflow type 'no_such_type'"),
        ({"timezone": "Mars/Olympus"}, InvalidSchedule, "'Mars/Olympus' is not a time zone"),
        ({"input": {"region": "moon"}}, InvalidWorkflowInput, "its input is refused.*region must be 'eu' or 'us'"),
        ({"input": None}, InvalidWorkflowInput, "its runs' input is refused"),
        ({"input": {"region": "eu", "at": datetime.date(2026, 1, 1)}}, InvalidWorkflowInput, "not JSON-serialisable"),
        ({"missed_ticks": "some"}, InvalidSchedule, "missed_ticks must be one of"),
        ({"name": ""}, InvalidSchedule, "name must be a non-empty string"),
    ],
)
def test_schedule__refuses_bad_input_naming_it_and_stores_nothing(arguments, error, message):
    given = {"name": "eu-report", "workflow_type": "region_report", "cron": "0 6 * * *", "input": {"region": "eu"}}
    given.update(arguments)
    with pytest.raises(error, match=message):
        schedule(given.pop("name"), given.pop("workflow_type"), given.pop("cron"), **given)
    assert not WorkflowSchedule.objects.filter(from_code=False).exists()


def test_schedule__a_refused_change_leaves_the_schedule_as_it_was():
    schedule("eu-report", "region_report", "0 6 * * *", input={"region": "eu"})
    with pytest.raises(InvalidSchedule):
        schedule("eu-report", "region_report", "0 25 * * *", input={"region": "eu"})
    assert WorkflowSchedule.objects.get(name="eu-report").cron == "0 6 * * *"


def test_schedule__of_a_schedule_of_the_code_is_refused():
    Scheduler().start_due_runs()  # the code's schedules get their rows
    with pytest.raises(InvalidSchedule, match="'monthly_bill' comes from the code"):
        schedule("monthly_bill", "monthly_bill", "0 0 2 * *")
    assert WorkflowSchedule.objects.get(name="monthly_bill").cron == "0 0 1 * *"


def test_pause_and_resume_schedule__of_an_unknown_name_are_refused():
    with pytest.raises(UnknownSchedule, match="No schedule is named 'nope'"):
        pause_schedule("nope")
    with pytest.raises(UnknownSchedule):
        resume_schedule("nope")


# -- the scheduler's passes -----------------------------------------------------------


def test_scheduler__a_new_schedule_starts_with_the_first_tick_after_it_was_made():
    row = schedule("eu-report", "region_report", "* * * * *", input={"region": "eu"})
    scheduler = Scheduler()
    scheduler.start_due_runs(now=row.active_since)
    assert runs_of("eu-report") == []
    scheduler.start_due_runs(now=row.active_since + datetime.timedelta(minutes=1))
    [run] = runs_of("eu-report")
    assert (run.workflow_type, run.input_data) == ("region_report", {"region": "eu"})


def test_scheduler__starts_the_latest_missed_tick_only_by_default():
    WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 1))
    Scheduler().start_due_runs(now=at(2026, 1, 1, 5, 30))
    assert ticked("hourly") == ["2026-01-01T05:00:00+00:00"]


def test_scheduler__starts_every_missed_tick_when_told_to_up_to_the_limit():
    WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 1), missed_ticks=MissedTicks.ALL)
    Scheduler().start_due_runs(now=at(2026, 1, 1, 5, 30))
    assert len(ticked("hourly")) == 5
    WorkflowScheduleFactory(name="minutely", cron="* * * * *", active_since=at(2026, 1, 1), missed_ticks="all")
    Scheduler().start_due_runs(now=at(2026, 1, 1, 5, 30))
    minutes = ticked("minutely")
    assert (len(minutes), minutes[-1]) == (100, "2026-01-01T05:30:00+00:00")  # the latest 100


def test_scheduler__starts_a_tick_once_across_schedulers_and_passes():
    WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 1), missed_ticks=MissedTicks.ALL)
    for scheduler in (Scheduler(), Scheduler(), Scheduler()):
        passes(scheduler, at(2026, 1, 1, 0, 30), at(2026, 1, 1, 3, 30), datetime.timedelta(minutes=20))
    assert ticked("hourly") == [f"2026-01-01T0{hour}:00:00+00:00" for hour in (1, 2, 3)]


@pytest.mark.django_db(transaction=True)
def test_scheduler__starts_a_tick_once_when_schedulers_pass_at_the_same_moment():
    WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 1), missed_ticks=MissedTicks.ALL)
    together = threading.Barrier(4)

    def scheduler_pass() -> None:
        try:
            together.wait()
            Scheduler().start_due_runs(now=at(2026, 1, 1, 3, 30))
        finally:
            connection.close()  # each thread's own connection

    threads = [threading.Thread(target=scheduler_pass) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ticked("hourly") == [f"2026-01-01T0{hour}:00:00+00:00" for hour in (1, 2, 3)]


def test_scheduler__sees_a_change_at_its_next_pass():
    row = WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 1))
    scheduler = Scheduler()
    scheduler.start_due_runs(now=at(2026, 1, 1, 1, 5))
    WorkflowSchedule.objects.filter(pk=row.pk).update(cron="*/10 * * * *")
    scheduler.start_due_runs(now=at(2026, 1, 1, 1, 10))
    assert ticked("hourly") == ["2026-01-01T01:00:00+00:00", "2026-01-01T01:10:00+00:00"]


def test_scheduler__a_paused_schedule_starts_nothing_and_resumed_skips_the_ticks_it_missed():
    row = schedule("eu-report", "region_report", "* * * * *", input={"region": "eu"}, enabled=False)
    scheduler = Scheduler()
    scheduler.start_due_runs(now=row.active_since + datetime.timedelta(minutes=5))
    assert runs_of("eu-report") == []
    resumed = resume_schedule("eu-report")
    assert resumed.enabled and resumed.active_since > row.active_since
    scheduler.start_due_runs(now=resumed.active_since)
    assert runs_of("eu-report") == []  # the ticks of the pause are not started
    scheduler.start_due_runs(now=resumed.active_since + datetime.timedelta(minutes=1))
    assert len(runs_of("eu-report")) == 1


def test_scheduler__a_schedule_of_the_code_is_listed_and_pausable():
    Scheduler().start_due_runs()
    row = WorkflowSchedule.objects.get(name="monthly_bill")
    assert (row.from_code, row.cron, row.workflow_type) == (True, "0 0 1 * *", "monthly_bill")
    assert len(runs_of("monthly_bill")) == 1
    pause_schedule("monthly_bill")
    Scheduler().start_due_runs(now=at(2099, 1, 1, 0, 0, 1))  # a later tick, paused: not started
    assert len(runs_of("monthly_bill")) == 1


def test_scheduler__a_run_gets_the_tick_in_the_schedules_time_zone():
    WorkflowScheduleFactory(name="berlin", cron="0 6 * * *", timezone="Europe/Berlin", active_since=at(2026, 7, 1))
    Scheduler().start_due_runs(now=at(2026, 7, 1, 4, 30))
    assert ticked("berlin") == ["2026-07-01T06:00:00+02:00"]
    [run] = runs_of("berlin")
    assert run.idempotency_key == "schedule:berlin:2026-07-01T04:00:00+00:00"


@pytest.mark.parametrize("missed_ticks", MissedTicks.values)
@pytest.mark.parametrize(
    ("night", "ticks"),
    [
        (at(2026, 3, 28, 12), ["2026-03-29T03:00:00+02:00"]),  # 02:30 does not exist: as the clocks jump
        (at(2026, 10, 24, 12), ["2026-10-25T02:30:00+02:00"]),  # 02:30 happens twice: the first
    ],
    ids=["spring", "autumn"],
)
def test_scheduler__a_daylight_saving_night_runs_its_time_once(night, ticks, missed_ticks):
    WorkflowScheduleFactory(
        name="night", cron="30 2 * * *", timezone="Europe/Berlin", active_since=night, missed_ticks=missed_ticks
    )
    passes(
        Scheduler(),
        night + datetime.timedelta(hours=10),
        night + datetime.timedelta(hours=16),
        datetime.timedelta(minutes=5),
    )
    assert ticked("night") == ticks


def test_scheduler__an_hourly_schedule_runs_each_real_hour_of_the_autumn_night():
    WorkflowScheduleFactory(name="hourly", timezone="Europe/Berlin", active_since=at(2026, 10, 24, 23, 30))
    passes(Scheduler(), at(2026, 10, 24, 23, 45), at(2026, 10, 25, 2, 15), datetime.timedelta(minutes=15))
    assert ticked("hourly") == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


# -- run now and backfill ------------------------------------------------------------


def test_run_now__starts_one_run_that_becomes_the_last_run():
    schedule("eu-report", "region_report", "0 6 * * *", input={"region": "eu"})
    run = run_now("eu-report")
    assert (run.workflow_type, run.input_data) == ("region_report", {"region": "eu"})
    assert ScheduleTick.objects.get(name="eu-report").workflow_id == run.pk


def test_backfill__starts_each_tick_between_two_moments_once():
    WorkflowScheduleFactory(name="hourly", active_since=at(2026, 1, 2))
    runs, existing = backfill("hourly", at(2026, 1, 1, 0, 30), at(2026, 1, 1, 3))
    assert (len(runs), existing) == (3, 0)
    runs, existing = backfill("hourly", at(2026, 1, 1), at(2026, 1, 1, 4))
    assert (len(runs), existing) == (2, 3)  # 00:00 and 04:00 are new
    assert ticked("hourly") == [f"2026-01-01T0{hour}:00:00+00:00" for hour in range(5)]


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (at(2026, 1, 2), at(2026, 1, 1), r"start .* is after its end"),
        (at(2026, 1, 1), at(2099, 1, 1), r"end .* is in the future"),
        (at(2020, 1, 1), at(2026, 1, 1), r"more than 1000 times"),
    ],
)
def test_backfill__refuses_a_bad_range_and_starts_nothing(start, end, message):
    WorkflowScheduleFactory(name="hourly")
    with pytest.raises(InvalidSchedule, match=message):
        backfill("hourly", start, end)
    assert runs_of("hourly") == []

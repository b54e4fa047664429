"""A schedule's ticks in its time zone, daylight-saving nights included: each
wall-clock time a schedule names ticks once a day, whether the night skips it
or has it twice."""

from __future__ import annotations

import datetime

import pytest

from orchestration import InvalidSchedule
from orchestration.schedules.cron import check_expression, latest_ticks, next_tick, ticks_between, zone

BERLIN = zone("Europe/Berlin")
UTC = datetime.UTC


def at(*parts: int) -> datetime.datetime:
    return datetime.datetime(*parts, tzinfo=UTC)


def shown(ticks: list[datetime.datetime]) -> list[str]:
    return [tick.isoformat() for tick in ticks]


def test_ticks__a_time_that_the_spring_night_skips_ticks_once_as_the_clocks_jump():
    ticks = ticks_between("30 2 * * *", BERLIN, at(2026, 3, 28), at(2026, 3, 30, 12), limit=10)
    assert shown(ticks) == ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]


def test_ticks__a_time_that_the_autumn_night_has_twice_ticks_once_at_its_first():
    ticks = ticks_between("30 2 * * *", BERLIN, at(2026, 10, 24), at(2026, 10, 26, 12), limit=10)
    assert shown(ticks) == ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_ticks__the_latest_tick_in_the_repeated_hour_is_its_first_occurrence():
    after_both = at(2026, 10, 25, 1, 45)  # 02:45 CET: 02:30 has happened twice
    assert shown(latest_ticks("30 2 * * *", BERLIN, after_both, after=None, limit=2)) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
    ]


def test_ticks__an_hourly_schedule_ticks_each_real_hour_of_the_autumn_night():
    ticks = ticks_between("0 * * * *", BERLIN, at(2026, 10, 24, 23), at(2026, 10, 25, 2), limit=10)
    assert shown(ticks) == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_ticks__an_hourly_schedule_skips_the_hour_the_spring_night_does_not_have():
    ticks = ticks_between("0 * * * *", BERLIN, at(2026, 3, 28, 23), at(2026, 3, 29, 2), limit=10)
    assert shown(ticks) == ["2026-03-29T00:00:00+01:00", "2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00",
                            "2026-03-29T04:00:00+02:00"]  # fmt: skip


def test_ticks__read_in_the_schedules_time_zone():
    assert next_tick("0 9 * * *", zone("America/New_York"), at(2026, 12, 4)).isoformat() == "2026-12-04T09:00:00-05:00"


def test_ticks__six_fields_tick_by_the_second():
    assert len(ticks_between("* * * * * */10", zone("UTC"), at(2026, 1, 1), at(2026, 1, 1, 0, 1), limit=10)) == 7


def test_latest_ticks__stop_at_the_limit_keeping_the_latest_oldest_first():
    ticks = latest_ticks("* * * * *", zone("UTC"), at(2026, 1, 1, 12, 0, 30), after=at(2026, 1, 1, 11), limit=3)
    assert shown(ticks) == ["2026-01-01T11:58:00+00:00", "2026-01-01T11:59:00+00:00", "2026-01-01T12:00:00+00:00"]


def test_latest_ticks__none_at_or_before_after():
    assert latest_ticks("0 * * * *", zone("UTC"), at(2026, 1, 1, 12, 30), after=at(2026, 1, 1, 12), limit=5) == []


def test_ticks_between__more_than_the_limit_is_refused_naming_it():
    with pytest.raises(InvalidSchedule, match=r"more than 100 times.*backfill at most 100 ticks"):
        ticks_between("* * * * *", zone("UTC"), at(2026, 1, 1), at(2026, 1, 2), limit=100)


@pytest.mark.parametrize("expression", ["every day", "61 * * * *", "* * * *", "", None, 5])
def test_check_expression__refuses_what_croniter_does_not_read(expression):
    with pytest.raises(InvalidSchedule, match="is not a cron expression"):
        check_expression(expression)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", None, "../etc/passwd", "Europe/"])
def test_zone__refuses_what_is_not_a_time_zone(name):
    with pytest.raises(InvalidSchedule, match="is not a time zone"):
        zone(name)

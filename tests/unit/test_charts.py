"""The geometry of the step timeline and of the hourly bar chart, and durations."""

import datetime

import pytest

from orchestration.reports import charts
from orchestration.reports.charts import StepTiming

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def step(number: int, start: float | None, end: float | None, status: str = "completed") -> StepTiming:
    return StepTiming(
        number, f"step {number}", status, None if start is None else at(start), None if end is None else at(end)
    )


def test_doctests__hold():
    import doctest

    assert doctest.testmod(charts).failed == 0


def test_timeline__places_each_step_on_the_workflows_own_time_axis():
    drawn = charts.timeline([step(1, 0, 2), step(2, 2, 3), step(3, 5, 10, "failed")], now=at(60))
    assert [(bar.offset_pct, bar.width_pct) for bar in drawn.bars] == [(0.0, 20.0), (20.0, 10.0), (50.0, 50.0)]
    assert drawn.start == T0 and drawn.seconds == 10
    assert drawn.duration_label == "10.0 s"


def test_timeline__a_running_step_ends_now_and_is_marked_open():
    drawn = charts.timeline([step(1, 0, 1), step(2, 1, None, "running")], now=at(4))
    running = drawn.bars[1]
    assert running.open_ended and running.seconds == 3
    assert (running.offset_pct, running.width_pct) == (25.0, 75.0)
    assert running.duration_label == "3.0 s so far"


def test_timeline__an_instant_step_stays_visible_and_inside_the_axis():
    drawn = charts.timeline([step(1, 0, 10), step(2, 10, 10)], now=at(10))
    instant = drawn.bars[1]
    assert instant.width_pct == charts.MIN_BAR_PCT
    assert instant.offset_pct + instant.width_pct <= 100.0


def test_timeline__steps_that_never_started_are_listed_not_drawn():
    drawn = charts.timeline([step(1, None, None, "pending")], now=at(0))
    assert drawn.bars == [] and [s.number for s in drawn.not_started] == [1]


def test_timeline__one_step_of_zero_duration_fills_the_axis():
    drawn = charts.timeline([step(1, 0, 0)], now=at(0))
    assert (drawn.bars[0].offset_pct, drawn.bars[0].width_pct) == (0.0, 100.0)


def test_hourly_bar_chart__scales_bars_to_a_round_maximum_and_labels_every_third_hour():
    hours = [T0 + datetime.timedelta(hours=h) for h in range(24)]
    chart = charts.hourly_bar_chart([(hour, 30 if h == 5 else 0, 1) for h, hour in enumerate(hours)], plot_height=100)
    assert chart.y_max == 50
    assert chart.groups[5].completed.height == 60.0
    assert chart.groups[5].completed.y == chart.plot_bottom - 60.0
    assert [group.label for group in chart.groups[:4]] == ["12:00", "", "", "15:00"]
    assert (chart.total_completed, chart.total_failed) == (30, 24)
    assert "30 completed, 1 failed" in chart.groups[5].title


def test_hourly_bar_chart__a_single_failure_among_thousands_still_shows():
    chart = charts.hourly_bar_chart([(T0, 5000, 1)], plot_height=100)
    assert chart.groups[0].failed.height == 1.0


def test_hourly_bar_chart__an_empty_day_draws_flat_bars():
    chart = charts.hourly_bar_chart([(T0, 0, 0)] * 24)
    assert chart.y_max == 1 and all(group.completed.height == 0 for group in chart.groups)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "—"), (-0.5, "0 ms"), (0.25, "250 ms"), (59.94, "59.9 s"), (61, "1m 1s"), (7200, "2h 0m")],
)
def test_format_duration__reads_at_a_glance(seconds, text):
    assert charts.format_duration(seconds) == text

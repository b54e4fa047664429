"""What the admin draws, as pure functions: chart geometry and durations.

The step timeline places each step as a horizontal bar on the workflow's own
time axis; the hourly chart turns counts into bar heights. Both are drawn on the
server (CSS and SVG), so the console needs no JavaScript.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Sequence

#: Narrowest bar drawn, in percent of the axis, so an instant step stays visible.
MIN_BAR_PCT = 0.4


@dataclasses.dataclass(frozen=True)
class StepTiming:
    number: int
    name: str | None
    status: str
    started_at: datetime.datetime | None
    completed_at: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class TimelineBar:
    step: StepTiming
    offset_pct: float
    width_pct: float
    seconds: float
    #: The step is still running: its bar ends at "now".
    open_ended: bool

    @property
    def duration_label(self) -> str:
        return format_duration(self.seconds) + (" so far" if self.open_ended else "")


@dataclasses.dataclass(frozen=True)
class Timeline:
    bars: list[TimelineBar]
    start: datetime.datetime | None
    seconds: float
    #: Steps with no start time (recorded, never run), listed but not drawn.
    not_started: list[StepTiming]

    @property
    def duration_label(self) -> str:
        return format_duration(self.seconds)


def timeline(steps: Sequence[StepTiming], now: datetime.datetime) -> Timeline:
    """Lay out ``steps`` on one axis from the first start to the last end.

    >>> t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    >>> s = lambda n, a, b: StepTiming(n, f"s{n}", "completed", t0 + datetime.timedelta(seconds=a),
    ...                                t0 + datetime.timedelta(seconds=b))
    >>> [(bar.offset_pct, bar.width_pct) for bar in timeline([s(1, 0, 1), s(2, 1, 4)], t0).bars]
    [(0.0, 25.0), (25.0, 75.0)]
    """
    started = [step for step in steps if step.started_at is not None]
    not_started = [step for step in steps if step.started_at is None]
    if not started:
        return Timeline([], None, 0.0, not_started)
    ends = {step.number: step.completed_at or max(now, _start(step)) for step in started}
    start = min(_start(step) for step in started)
    total = max((max(ends.values()) - start).total_seconds(), 0.0)
    bars = []
    for step in started:
        seconds = (ends[step.number] - _start(step)).total_seconds()
        offset = min(100.0 * (_start(step) - start).total_seconds() / total if total else 0.0, 100.0 - MIN_BAR_PCT)
        width = min(max(100.0 * seconds / total if total else 100.0, MIN_BAR_PCT), 100.0 - offset)
        bars.append(TimelineBar(step, round(offset, 2), round(width, 2), seconds, step.completed_at is None))
    return Timeline(bars, start, total, not_started)


def format_duration(seconds: float | None) -> str:
    """A short human reading of a duration, to two units at most.

    >>> [format_duration(s) for s in (None, 0.0123, 1.5, 75, 3725, 90061)]
    ['—', '12 ms', '1.5 s', '1m 15s', '1h 2m', '1d 1h']
    """
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    for unit, size, sub_unit, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // sub_size}{sub_unit}"
    raise AssertionError("unreachable")


def format_elapsed(
    start: datetime.datetime | None, end: datetime.datetime | None, now: datetime.datetime, *, running: bool
) -> str:
    """How long something ran: up to ``now`` while ``running``, else from start to end.

    >>> t = datetime.datetime(2026, 1, 1)
    >>> later = t + datetime.timedelta(seconds=3)
    >>> format_elapsed(t, None, later, running=True), format_elapsed(t, later, later, running=False)
    ('3.0 s so far', '3.0 s')
    >>> format_elapsed(None, None, later, running=True), format_elapsed(t, None, later, running=False)
    ('—', '—')
    """
    if start is None:
        return "—"
    if running:
        return f"{format_duration((now - start).total_seconds())} so far"
    return format_duration((end - start).total_seconds()) if end is not None else "—"


def _start(step: StepTiming) -> datetime.datetime:
    assert step.started_at is not None
    return step.started_at


@dataclasses.dataclass(frozen=True)
class ChartBar:
    x: float
    y: float
    height: float
    value: int


@dataclasses.dataclass(frozen=True)
class ChartGroup:
    label: str
    label_x: float
    title: str
    completed: ChartBar
    failed: ChartBar


@dataclasses.dataclass(frozen=True)
class BarChart:
    groups: list[ChartGroup]
    width: float
    height: float
    plot_top: float
    plot_bottom: float
    y_max: int
    bar_width: float
    total_completed: int
    total_failed: int


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value``.

    >>> [nice_ceiling(v) for v in (0, 1, 3, 7, 10, 11, 240, 5001)]
    [1, 1, 5, 10, 10, 20, 500, 10000]
    """
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value:
            return factor * power
    raise AssertionError("unreachable")


def hourly_bar_chart(
    buckets: Sequence[tuple[datetime.datetime, int, int]],
    *,
    group_width: float = 30.0,
    plot_height: float = 140.0,
    label_every: int = 3,
) -> BarChart:
    """Side-by-side completed / failed bars for each ``(hour, completed, failed)``.

    >>> hour = datetime.datetime(2026, 1, 1, 9)
    >>> chart = hourly_bar_chart([(hour, 10, 0), (hour, 4, 1)], group_width=30, plot_height=100)
    >>> chart.y_max, [g.completed.height for g in chart.groups], chart.groups[1].failed.height
    (10, [100.0, 40.0], 10.0)
    """
    top, bottom_margin, left = 12.0, 22.0, 36.0
    y_max = nice_ceiling(max([max(completed, failed) for _, completed, failed in buckets] or [0]))
    bar_width = group_width * 0.38
    plot_bottom = top + plot_height
    groups = []
    for index, (hour, completed, failed) in enumerate(buckets):
        x = left + index * group_width + group_width * 0.1
        groups.append(
            ChartGroup(
                label=f"{hour:%H}:00" if hour.hour % label_every == 0 else "",
                label_x=round(x + bar_width, 2),
                title=f"{hour:%Y-%m-%d %H}:00: {completed} completed, {failed} failed",
                completed=_bar(x, completed, y_max, plot_height, plot_bottom),
                failed=_bar(x + bar_width, failed, y_max, plot_height, plot_bottom),
            )
        )
    return BarChart(
        groups=groups,
        width=left + len(buckets) * group_width + 8,
        height=plot_bottom + bottom_margin,
        plot_top=top,
        plot_bottom=plot_bottom,
        y_max=y_max,
        bar_width=bar_width,
        total_completed=sum(completed for _, completed, _ in buckets),
        total_failed=sum(failed for _, _, failed in buckets),
    )


def _bar(x: float, value: int, y_max: int, plot_height: float, plot_bottom: float) -> ChartBar:
    height = round(plot_height * value / y_max, 2)
    if value and height < 1:
        height = 1.0  # one workflow among thousands still shows
    return ChartBar(x=round(x, 2), y=round(plot_bottom - height, 2), height=height, value=value)

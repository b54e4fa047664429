"""A schedule's ticks: the moments its cron expression names in its time zone.

Pure functions of an expression, a time zone and moments (aware datetimes),
parsed by ``croniter``. Daylight saving time follows cron's own rule (Vixie
cron's, kept by cronie), so that a schedule of fixed times runs each once a day:

- a time that a spring-forward day skips (02:30 in Europe/Berlin on the last
  Sunday of March) ticks once, as the clocks jump (03:00);
- a time that an autumn day has twice (02:30 on the last Sunday of October)
  ticks once, at its first occurrence, when the expression names its hours;
  one whose hour field is ``*`` or ``*/N`` (hourly, every few minutes) ticks in
  the repeated hour too, as its real hours pass.

A tick is identified by its moment (UTC): the same tick read in two processes,
or before and after a restart, is the same. Ticks are compared in UTC: Python
compares two datetimes of one zone by their wall-clock times, fold ignored, so
the two 02:00 of an autumn night would be equal.
"""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Iterator

from croniter import croniter

from ..errors import InvalidSchedule

#: The expressions croniter reads: five fields, or six with seconds last.
EXPRESSION_HELP = "five fields, or six with seconds last: '*/5 * * * *', '30 2 * * *', '* * * * * */10'"


def check_expression(expression: object) -> str:
    """``expression`` if croniter reads it, else ``InvalidSchedule`` naming it."""
    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise InvalidSchedule(f"{expression!r} is not a cron expression ({EXPRESSION_HELP}).")
    return expression


def zone(name: object) -> zoneinfo.ZoneInfo:
    """The time zone ``name`` (an IANA name such as ``Europe/Berlin``), else ``InvalidSchedule``."""
    if isinstance(name, str) and name:
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    raise InvalidSchedule(f"{name!r} is not a time zone; use an IANA name such as 'UTC' or 'Europe/Berlin'.")


def _repeated_hour_runs_twice(expression: str) -> bool:
    """Whether the expression's hour field is ``*`` or ``*/N``: it ticks by real hours."""
    return expression.split()[1].startswith("*")


def _second_occurrence(tick: datetime.datetime, tz: zoneinfo.ZoneInfo) -> bool:
    """Whether ``tick``'s wall-clock time happened earlier that night (the clocks went back)."""
    wall = tick.astimezone(tz).replace(tzinfo=None)
    return wall.replace(tzinfo=tz, fold=0).astimezone(datetime.UTC) != tick.astimezone(datetime.UTC)


def _walk(
    expression: str, tz: zoneinfo.ZoneInfo, start: datetime.datetime, *, back: bool
) -> Iterator[datetime.datetime]:
    """Ticks from ``start`` (excluded), later ones or (``back``) earlier ones, in ``tz``."""
    skip_repeats = not _repeated_hour_runs_twice(expression)
    times = croniter(expression, start.astimezone(tz))
    step = times.get_prev if back else times.get_next
    while True:
        tick: datetime.datetime = step(datetime.datetime)
        if not (skip_repeats and _second_occurrence(tick, tz)):
            yield tick.astimezone(tz)


def latest_ticks(
    expression: str, tz: zoneinfo.ZoneInfo, now: datetime.datetime, *, after: datetime.datetime | None, limit: int
) -> list[datetime.datetime]:
    """Up to ``limit`` ticks at or before ``now`` and after ``after`` (when
    given), the latest of them, oldest first."""
    found: list[datetime.datetime] = []
    for tick in _walk(expression, tz, now + datetime.timedelta(microseconds=1), back=True):
        if len(found) == limit or (after is not None and tick.astimezone(datetime.UTC) <= after):
            break
        found.append(tick)
    return found[::-1]


def latest_tick(expression: str, now: datetime.datetime, tz: zoneinfo.ZoneInfo | None = None) -> datetime.datetime:
    """The last tick at or before ``now`` (in UTC when no time zone is given)."""
    return latest_ticks(expression, tz or zoneinfo.ZoneInfo("UTC"), now, after=None, limit=1)[0]


def next_tick(expression: str, tz: zoneinfo.ZoneInfo, now: datetime.datetime) -> datetime.datetime:
    """The first tick after ``now``."""
    return next(_walk(expression, tz, now, back=False))


def ticks_between(
    expression: str, tz: zoneinfo.ZoneInfo, start: datetime.datetime, end: datetime.datetime, *, limit: int
) -> list[datetime.datetime]:
    """The ticks from ``start`` to ``end``, both included, oldest first;
    ``InvalidSchedule`` when there are more than ``limit``."""
    found: list[datetime.datetime] = []
    for tick in _walk(expression, tz, start - datetime.timedelta(microseconds=1), back=False):
        if tick.astimezone(datetime.UTC) > end:
            return found
        if len(found) == limit:
            raise InvalidSchedule(
                f"{expression!r} ticks more than {limit} times from {start.isoformat()} to {end.isoformat()}; "
                f"backfill at most {limit} ticks at once (a shorter range)."
            )
        found.append(tick)
    raise AssertionError("unreachable: croniter's ticks never end")  # pragma: no cover

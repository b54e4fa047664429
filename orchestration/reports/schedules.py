"""The schedules as ``workflows schedules list`` shows them: each with its
next tick and its last run, as the admin's list of schedules shows them."""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import OuterRef, Subquery

from .. import moments
from ..conf import conf
from ..errors import InvalidSchedule
from ..models import ScheduleTick, WorkflowSchedule
from ..schedules.cron import next_tick, zone
from ..schedules.scheduler import sync_code_schedules

#: The columns of a schedule the list shows.
FIELDS = ("name", "workflow_type", "cron", "timezone", "enabled", "from_code", "missed_ticks", "input")


def rows(now: datetime.datetime) -> list[dict[str, Any]]:
    """Every schedule by name (the code's too, written first if no worker did
    yet): its columns, its next tick after ``now`` (None when paused; the
    error's text for an expression written by SQL that is not one), its last run."""
    sync_code_schedules()
    ticks = ScheduleTick.objects.using(conf.DATABASE).filter(name=OuterRef("name"))
    found = (
        WorkflowSchedule.objects.using(conf.DATABASE)
        .annotate(last_run=Subquery(ticks.values("workflow_id")), last_started_at=Subquery(ticks.values("started_at")))
        .order_by("name")
        .values(*FIELDS, "last_run", "last_started_at")
    )
    return [{**row, "next_tick": _next_tick(row, now)} for row in found]


def _next_tick(row: dict[str, Any], now: datetime.datetime) -> datetime.datetime | str | None:
    if not row["enabled"]:
        return None
    try:
        return next_tick(row["cron"], zone(row["timezone"]), moments.local(now))
    except InvalidSchedule as exc:
        return str(exc)

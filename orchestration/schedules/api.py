"""The operator's changes to schedules: ``schedule`` (make or change one by
name), ``pause_schedule``, ``resume_schedule``, ``run_now``, ``backfill``, as
the admin and user code make them. Each checks everything first and raises a
clear error, with nothing written; the scheduler of every process sees the
change at its next pass.

Schedules declared in code (``@workflow(schedule=...)``) get a row each from
``scheduler.sync_code_schedules``: their expression is the code's, changed by a deploy,
and an operator only pauses and resumes them.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from .. import clock, moments
from ..api import check_input, start_workflow
from ..conf import conf
from ..errors import InvalidSchedule, InvalidWorkflowInput, UnknownSchedule
from ..models import MissedTicks, ScheduleTick, Workflow, WorkflowSchedule
from .cron import check_expression, ticks_between, zone
from .scheduler import scheduled_input, start_runs, sync_code_schedules

logger = logging.getLogger(__name__)

#: The most ticks one backfill starts.
BACKFILL_LIMIT = 1000

#: How long a schedule's name may be (its runs' idempotency key holds it).
NAME_MAX_LENGTH = 200


def check_schedule(name: Any, workflow_type: Any, cron: Any, *, input: Any, timezone: Any, missed_ticks: Any) -> None:
    """Raise the first problem of a schedule's fields: ``InvalidSchedule`` (its
    name, expression, time zone or missed-ticks policy), ``UnknownWorkflowType``,
    or ``InvalidWorkflowInput`` (the input the workflow's declared ``input=`` or
    ``concurrency_key`` function refuses, or that is not JSON)."""
    check_name(name)
    check_expression(cron)
    zone(timezone)
    if missed_ticks not in MissedTicks.values:
        raise InvalidSchedule(f"missed_ticks must be one of {MissedTicks.values}, not {missed_ticks!r}.")
    sample = scheduled_input(clock.now()) if input is None else input
    try:
        check_input(workflow_type, sample)
    except InvalidWorkflowInput as exc:
        refused = "its runs' input" if input is None else "its input"
        raise InvalidWorkflowInput(f"Schedule {name!r}: {refused} is refused: {exc}") from exc


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX_LENGTH:
        raise InvalidSchedule(
            f"A schedule's name must be a non-empty string of at most {NAME_MAX_LENGTH} characters, not {name!r}."
        )
    return name


def schedule(
    name: str,
    workflow_type: str,
    cron: str,
    *,
    input: Any = None,
    timezone: str = "UTC",
    enabled: bool = True,
    missed_ticks: str = MissedTicks.LATEST,
) -> WorkflowSchedule:
    """Make schedule ``name``, or change it to what this call says; returns its row.

    ``cron``: five fields, or six with seconds last, read in ``timezone`` (an
    IANA name). ``input``: every tick's run's input (checked now against the
    workflow's declared ``input=``); None gives each run
    ``{"scheduled_for": "<the tick, ISO 8601>"}``. ``missed_ticks``: of the
    ticks that passed while no worker ran, ``"latest"`` starts the latest only,
    ``"all"`` each of them (at most ``MISSED_TICKS_LIMIT``, the latest ones).
    A new schedule, or a new expression or time zone, starts with the first
    tick after this call. Raises ``InvalidSchedule``, ``UnknownWorkflowType``
    or ``InvalidWorkflowInput``, with nothing written.
    """
    check_schedule(name, workflow_type, cron, input=input, timezone=timezone, missed_ticks=missed_ticks)
    if not isinstance(enabled, bool):
        raise InvalidSchedule(f"enabled must be True or False, not {enabled!r}.")
    sync_code_schedules()
    fields = dict(workflow_type=workflow_type, cron=cron, timezone=timezone, input=input, missed_ticks=missed_ticks)
    rows = WorkflowSchedule.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        row = rows.select_for_update().filter(name=name).first()
        if row is None:
            try:
                with transaction.atomic(using=conf.DATABASE):
                    created = rows.create(name=name, enabled=enabled, active_since=Now(), **fields)
                # Django < 6 leaves the Now() expression on the instance: read what was stored
                return rows.get(pk=created.pk)
            except IntegrityError:  # made meanwhile by another call: changed below
                row = rows.select_for_update().get(name=name)
        if row.from_code:
            raise InvalidSchedule(
                f"Schedule {name!r} comes from the code (@workflow(schedule=...)): change it there; "
                "pause_schedule and resume_schedule apply to it."
            )
        changes: dict[str, Any] = {**fields, "enabled": enabled, "updated_at": Now()}
        if row.cron != cron or row.timezone != timezone or (enabled and not row.enabled):
            changes["active_since"] = Now()
        rows.filter(pk=row.pk).update(**changes)
    return rows.get(name=name)


def pause_schedule(name: str) -> WorkflowSchedule:
    """Start no more ticks of schedule ``name`` (its runs started go on), from
    every scheduler's next pass. Raises ``UnknownSchedule``."""
    return _change(name, enabled=False)


def resume_schedule(name: str) -> WorkflowSchedule:
    """Start schedule ``name``'s ticks again, from the first after now: the
    ticks that passed while it was paused are not started. Raises ``UnknownSchedule``."""
    return _change(name, enabled=True)


def _change(name: str, *, enabled: bool) -> WorkflowSchedule:
    sync_code_schedules()
    rows = WorkflowSchedule.objects.using(conf.DATABASE).filter(name=name)
    changes: dict[str, Any] = {"enabled": enabled, "updated_at": Now()}
    with transaction.atomic(using=conf.DATABASE):
        if not rows.exists():
            raise UnknownSchedule(f"No schedule is named {name!r}.")
        if enabled:  # a resume moves on from now; resuming one not paused changes nothing
            rows.filter(enabled=False).update(active_since=Now(), **changes)
        else:
            rows.update(**changes)
    return rows.get()


def get_schedule(name: str) -> WorkflowSchedule:
    try:
        return WorkflowSchedule.objects.using(conf.DATABASE).get(name=name)
    except WorkflowSchedule.DoesNotExist:
        raise UnknownSchedule(f"No schedule is named {name!r}.") from None


def run_now(name: str) -> Workflow:
    """Start one run of schedule ``name`` now, as a tick of now would (paused or
    not); it becomes the schedule's last run. Its ticks go on as they were."""
    row = get_schedule(name)
    now = moments.local(clock.now()).astimezone(zone(row.timezone))
    run = start_workflow(row.workflow_type, scheduled_input(now) if row.input is None else row.input)
    ticks = ScheduleTick.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        ticks.bulk_create([ScheduleTick(name=name)], ignore_conflicts=True)
        ticks.filter(name=name).update(workflow_id=run.pk, started_at=Now())
    return run


def backfill(name: str, start: datetime.datetime, end: datetime.datetime) -> tuple[list[Workflow], int]:
    """Start the runs of schedule ``name``'s ticks from ``start`` to ``end`` (both
    included), each once: a tick that has a run (the scheduler's, or an earlier
    backfill's, not yet purged) is not started again. Returns the runs started
    and how many ticks already had one. Raises ``InvalidSchedule`` for a range
    that is backwards, ends in the future, or holds more than ``BACKFILL_LIMIT``
    ticks, and ``UnknownSchedule``; nothing is started then."""
    row = get_schedule(name)
    start, end = (moments.local(moments.given(moment, what)) for moment, what in ((start, "start"), (end, "end")))
    if start > end:
        raise InvalidSchedule(f"A backfill's start ({start.isoformat()}) is after its end ({end.isoformat()}).")
    now = moments.local(clock.now())
    if end > now:
        raise InvalidSchedule(f"A backfill's end ({end.isoformat()}) is in the future; its ticks will come.")
    ticks = ticks_between(row.cron, zone(row.timezone), start, end, limit=BACKFILL_LIMIT)
    from .scheduler import tick_key

    keys = {tick_key(name, tick): tick for tick in ticks}
    existing = set(
        Workflow.objects.using(conf.DATABASE)
        .filter(idempotency_key__in=list(keys))
        .values_list("idempotency_key", flat=True)
    )
    due = [tick for key, tick in keys.items() if key not in existing]
    runs = start_runs(row, due) if due else []
    logger.info("schedule %s: backfilled %s ticks from %s to %s", name, len(runs), start, end)
    return runs, len(existing)

"""The scheduler: every ``runworkers`` process's pass over the schedules, about
once a poll interval, by the database's clock.

Each pass reads the enabled rows of ``workflow_schedules`` (so a schedule made,
changed or paused holds from the next pass, with no restart) and starts the
due ticks of those whose workflow type this process registers. The last tick
started of each schedule is kept in ``workflow_schedule_ticks``, which
retention never touches, and is locked while a tick's run is started and
written in the same transaction; the run's idempotency key is
``schedule:<name>:<tick in UTC>``. However many processes see the same tick,
and whether or not its run has since been purged, one run is started for it.

Of the ticks missed while no worker ran, a schedule starts the latest only
(``missed_ticks="latest"``), or all of them up to ``MISSED_TICKS_LIMIT``, the
latest ones (``"all"``). Ticks at or before the row's ``active_since`` (its
making, a change of its expression or time zone, its resume) are never started.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from .. import clock, moments
from ..conf import conf
from ..errors import InvalidSchedule, InvalidWorkflowInput
from ..inputs import as_json
from ..outages import is_outage
from ..registry import WorkflowDefinition, find_workflow, registered_workflows
from ..validation import validate_concurrency_key
from .cron import check_expression, latest_ticks, next_tick, zone

logger = logging.getLogger(__name__)

#: The most missed ticks a schedule with ``missed_ticks="all"`` starts at once (the latest ones).
MISSED_TICKS_LIMIT = 100


def validate_schedule(expression: str) -> None:
    """``@workflow(schedule=...)``'s check, before Django is ready."""
    try:
        check_expression(expression)
    except InvalidSchedule as exc:
        raise ImproperlyConfigured(f"@workflow schedule {exc}") from None


def scheduled_input(tick: datetime.datetime) -> dict[str, str]:
    """The input of a tick's run, for a schedule given none."""
    return {"scheduled_for": tick.isoformat()}


def tick_key(name: str, tick: datetime.datetime) -> str:
    """The idempotency key of a tick's run."""
    return f"schedule:{name}:{tick.astimezone(datetime.UTC).isoformat()}"


def check_scheduled_input(definition: WorkflowDefinition) -> None:
    """Refuse, when it is declared, a schedule every tick's start would fail:
    its runs' input refused by the workflow's ``input=``, or its
    ``concurrency_key`` function failing on that input."""
    sample = scheduled_input(timezone.now())
    shape = '{"scheduled_for": "<the tick, ISO 8601>"}'
    try:
        definition.argument(sample)
    except InvalidWorkflowInput as exc:
        raise ImproperlyConfigured(
            f"@workflow {definition.name!r}: its schedule starts runs with the input {shape}, "
            f"which its input= refuses: {exc}"
        ) from None
    if definition.concurrency_key is None:
        return
    stored = sample if definition.input_schema is None else as_json(definition.input_schema, sample)
    try:
        validate_concurrency_key(definition.concurrency_key(stored))
    except (LookupError, TypeError, ValueError, AttributeError, InvalidWorkflowInput) as exc:
        raise ImproperlyConfigured(
            f"@workflow {definition.name!r}: its concurrency_key function fails on its schedule's input "
            f"{shape} ({exc!r}); make it handle that input (return None for no key)."
        ) from None
    except Exception:
        # Not an input it cannot read: one that needs more (the database, before
        # Django is ready) is judged at each start, where a failure is the schedule's own.
        pass


def scheduled_workflows() -> list[WorkflowDefinition]:
    """The workflows of this process declared with ``@workflow(schedule=...)``."""
    return [definition for definition in registered_workflows().values() if definition.schedule]


def runs_here(workflow_type: str, from_code: bool) -> bool:
    """Whether this process starts a schedule's ticks: it registers the type
    (a worker that does not leaves them to one that does) and, for a schedule
    of the code, still declares it."""
    definition = find_workflow(workflow_type)
    return definition is not None and (not from_code or bool(definition.schedule))


class Scheduler:
    """Starts each schedule's due ticks, once: what one process's scheduler
    remembers between passes (of each schedule, the expression and time zone
    it last handled and the tick after the one it handled then; the ticks
    whose start failed and was logged), in front of what every process shares
    (``workflow_schedule_ticks``). A pass before a schedule's next tick costs
    a comparison, not croniter's reading of its expression, which for a
    hundred schedules would take most of a pass."""

    def __init__(self) -> None:
        self._next: dict[str, tuple[str, str, datetime.datetime]] = {}
        self._failed: dict[str, Any] = {}
        self._synced = False

    def start_due_runs(self, now: datetime.datetime | None = None) -> None:
        """Start each enabled schedule's due ticks not started yet (``now``: the
        database's clock). A schedule whose start fails is logged, once a tick,
        and tried again at the next pass; the others go on. A database outage
        is raised: it stops them all."""
        from ..models import WorkflowSchedule

        if not self._synced:  # this process's @workflow(schedule=...) get their rows, once
            sync_code_schedules()
            self._synced = True
        now = (now or moments.local(clock.now())).astimezone(datetime.UTC)
        rows = WorkflowSchedule.objects.using(conf.DATABASE).filter(enabled=True)
        for name, workflow_type, cron, zone_name, from_code in rows.values_list(
            "name", "workflow_type", "cron", "timezone", "from_code"
        ):
            if not runs_here(workflow_type, from_code):
                continue
            handled = self._next.get(name)
            if handled is not None and handled[:2] == (cron, zone_name) and now < handled[2]:
                continue  # its next tick has not come
            tick: Any = (cron, zone_name)
            try:
                tz = zone(zone_name)
                tick = latest_ticks(cron, tz, now, after=None, limit=1)[0].astimezone(datetime.UTC)
                start_due_ticks(name, now)
            except Exception as exc:
                if is_outage(exc):
                    raise
                if self._failed.get(name) != tick:
                    self._failed[name] = tick
                    logger.exception("schedule %s: the run of its tick of %s could not be started", name, tick)
                continue
            self._next[name] = (cron, zone_name, next_tick(cron, tz, tick).astimezone(datetime.UTC))


def start_due_ticks(name: str, now: datetime.datetime) -> list[uuid.UUID]:
    """Start the runs of schedule ``name``'s due ticks that its ledger row does
    not say were started; returns their ids. The ledger row is locked while
    they are started and written in the same transaction, so of the processes
    that see a tick, one starts it; the schedule's row is read under that lock,
    so a change made meanwhile is seen."""
    from ..models import MissedTicks, ScheduleTick, WorkflowSchedule

    ticks = ScheduleTick.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        ticks.bulk_create([ScheduleTick(name=name)], ignore_conflicts=True)
        last = ticks.select_for_update().values_list("last_tick", flat=True).get(name=name)
        row = WorkflowSchedule.objects.using(conf.DATABASE).filter(name=name, enabled=True).first()
        if row is None:
            return []
        known = [moments.local(moment) for moment in (last, row.active_since) if moment is not None]
        limit = MISSED_TICKS_LIMIT if row.missed_ticks == MissedTicks.ALL else 1
        due = latest_ticks(row.cron, zone(row.timezone), now, after=max(known, default=None), limit=limit)
        if not due:
            return []
        runs = start_runs(row, due)
        ticks.filter(name=name).update(last_tick=moments.as_django(due[-1]), workflow_id=runs[-1].pk, started_at=Now())
    logger.debug("schedule %s: started the ticks of %s", name, ", ".join(tick.isoformat() for tick in due))
    return [run.pk for run in runs]


def start_runs(row: Any, due: list[datetime.datetime]) -> list[Any]:
    """The runs of schedule ``row``'s ticks ``due``, in one statement; a tick
    whose run exists (its key was used) gets that run, not another."""
    from ..api import start_workflows

    inputs = [scheduled_input(tick) if row.input is None else row.input for tick in due]
    return start_workflows(row.workflow_type, inputs, idempotency_keys=[tick_key(row.name, tick) for tick in due])


def sync_code_schedules() -> None:
    """Give each ``@workflow(schedule=...)`` of this process a row, and its
    expression to one that has a row: a deploy changes it, an operator's pause
    holds. A row of the code whose workflow this process registers with no
    schedule any more is deleted (its ledger of ticks stays). A name an
    operator's schedule holds already is left to it, and logged."""
    from ..models import WorkflowSchedule

    declared = {definition.name: definition.schedule or "" for definition in scheduled_workflows()}

    rows = WorkflowSchedule.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        rows.bulk_create(
            [
                WorkflowSchedule(name=name, workflow_type=name, cron=cron, from_code=True)
                for name, cron in declared.items()
            ],
            ignore_conflicts=True,
        )
        held = rows.filter(name__in=list(declared)).values_list("name", "cron", "from_code")
        for name, cron, from_code in held:
            if not from_code:
                logger.warning(
                    "schedule %s: @workflow(schedule=...) declares it, but an operator's schedule has its name; "
                    "the operator's runs",
                    name,
                )
            elif cron != declared[name]:
                rows.filter(name=name, from_code=True).update(cron=declared[name], updated_at=Now())
        undeclared = [name for name in registered_workflows() if name not in declared]
        rows.filter(from_code=True, workflow_type__in=undeclared).delete()

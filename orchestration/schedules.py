"""Cron schedules: ``@workflow(..., schedule="*/5 * * * *")``.

Every ``runworkers`` process looks for due ticks, by the database's clock, in
UTC. The last tick started of each schedule is kept in
``workflow_schedule_ticks``, which retention never touches, and the run of a
tick is started with the idempotency key ``schedule:<type>:<tick>``: however
many processes see the same tick, and whether or not its run has since been
purged, exactly one run is started for it. Only the latest tick is started: a
tick missed while no worker ran is run once when one starts, and older missed
ticks are not replayed.
"""

from __future__ import annotations

import datetime
import logging
import uuid

from croniter import croniter
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from . import clock, moments
from .conf import conf
from .errors import InvalidWorkflowInput
from .inputs import as_json
from .outages import is_outage
from .registry import WorkflowDefinition, registered_workflows
from .validation import validate_concurrency_key

logger = logging.getLogger(__name__)


def validate_schedule(expression: str) -> None:
    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise ImproperlyConfigured(
            f"@workflow schedule {expression!r} is not a cron expression "
            "(five fields, or six with seconds last: '*/5 * * * *', '* * * * * */10')."
        )


def scheduled_input(tick: datetime.datetime) -> dict[str, str]:
    """The input of a tick's run."""
    return {"scheduled_for": tick.isoformat()}


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


def latest_tick(expression: str, now: datetime.datetime) -> datetime.datetime:
    """The last tick at or before ``now``."""
    return croniter(expression, now + datetime.timedelta(microseconds=1)).get_prev(datetime.datetime)


def scheduled_workflows() -> list[WorkflowDefinition]:
    return [definition for definition in registered_workflows().values() if definition.schedule]


class Scheduler:
    """Starts the run of each schedule's latest tick, once: what one process's
    scheduler remembers between passes (the ticks it started, those whose start
    failed and was logged), in front of what every process shares
    (``workflow_schedule_ticks``)."""

    def __init__(self) -> None:
        self._started: dict[str, datetime.datetime] = {}
        self._failed: dict[str, datetime.datetime] = {}

    def start_due_runs(self) -> None:
        """Start each schedule's latest tick not started yet. A schedule whose
        start fails is logged, once a tick, and tried again at the next pass;
        the others go on. A database outage is raised: it stops them all."""
        now = moments.local(clock.now()).astimezone(datetime.UTC)  # ticks in UTC, whatever USE_TZ
        for definition in scheduled_workflows():
            assert definition.schedule is not None
            tick = latest_tick(definition.schedule, now)
            if self._started.get(definition.name) == tick:
                continue
            try:
                start_tick(definition, tick)
            except Exception as exc:
                if is_outage(exc):
                    raise
                if self._failed.get(definition.name) != tick:
                    self._failed[definition.name] = tick
                    logger.exception(
                        "schedule %s: the run of its tick of %s could not be started", definition.name, tick
                    )
                continue
            self._started[definition.name] = tick


def start_tick(definition: WorkflowDefinition, tick: datetime.datetime) -> uuid.UUID | None:
    """Start the run of ``tick`` unless its schedule's row says this tick, or a
    later one, was started; returns the run's id, or None. The row is locked
    while the run is started and written in the same transaction, so of the
    processes that see the tick, one starts it."""
    from .api import start_workflow
    from .models import ScheduleTick

    ticks = ScheduleTick.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        ticks.bulk_create([ScheduleTick(name=definition.name)], ignore_conflicts=True)
        last = ticks.select_for_update().values_list("last_tick", flat=True).get(name=definition.name)
        if last is not None and moments.local(last) >= tick:
            return None
        key = f"schedule:{definition.name}:{tick.isoformat()}"
        workflow = start_workflow(definition.name, scheduled_input(tick), idempotency_key=key)
        ticks.filter(name=definition.name).update(
            last_tick=moments.as_django(tick), workflow_id=workflow.pk, started_at=Now()
        )
    logger.debug("schedule %s: workflow %s runs the tick of %s", definition.name, workflow.pk, tick)
    return workflow.pk

"""Cron schedules: ``@workflow(..., schedule="*/5 * * * *")``.

Every ``runworkers`` process looks for due ticks; the run of a tick is started
with the idempotency key ``schedule:<type>:<tick>``, so however many processes
see the same tick, exactly one run exists for it. Only the latest tick is
started: a tick missed while no worker ran is run once when one starts, and
older missed ticks are not replayed.
"""

from __future__ import annotations

import datetime
import logging

from croniter import croniter
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from .errors import InvalidWorkflowInput
from .registry import WorkflowDefinition, registered_workflows

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
    """Refuse, when it is declared, a schedule whose runs' input the workflow's
    ``input=`` would refuse: every tick's start would fail."""
    try:
        definition.argument(scheduled_input(timezone.now()))
    except InvalidWorkflowInput as exc:
        raise ImproperlyConfigured(
            f"@workflow {definition.name!r}: its schedule starts runs with the input "
            f'{{"scheduled_for": "<the tick, ISO 8601>"}}, which its input= refuses: {exc}'
        ) from None


def latest_tick(expression: str, now: datetime.datetime) -> datetime.datetime:
    """The last tick at or before ``now``."""
    return croniter(expression, now + datetime.timedelta(microseconds=1)).get_prev(datetime.datetime)


def scheduled_workflows() -> list[WorkflowDefinition]:
    return [definition for definition in registered_workflows().values() if definition.schedule]


def start_due_runs(started_ticks: dict[str, datetime.datetime]) -> None:
    """Start the run of each schedule's latest tick not started by this process
    yet (another process may have: then the existing run is kept);
    ``started_ticks`` remembers them between calls."""
    from .api import start_workflow

    now = timezone.now()
    for definition in scheduled_workflows():
        assert definition.schedule is not None
        tick = latest_tick(definition.schedule, now)
        if started_ticks.get(definition.name) == tick:
            continue
        key = f"schedule:{definition.name}:{tick.isoformat()}"
        workflow = start_workflow(definition.name, scheduled_input(tick), idempotency_key=key)
        started_ticks[definition.name] = tick
        logger.debug("schedule %s: workflow %s runs the tick of %s", definition.name, workflow.pk, tick)

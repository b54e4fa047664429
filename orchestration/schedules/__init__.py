"""Cron schedules: one run a tick, however many ``runworkers`` processes run.

A schedule is a row of ``workflow_schedules`` (``models.WorkflowSchedule``),
made in the admin or with ``orchestration.schedule``, or declared in code with
``@workflow(..., schedule="*/5 * * * *")`` (a row too, marked ``from_code``).

- ``cron``: the ticks of an expression in a time zone, daylight saving included (pure);
- ``scheduler``: every process's pass, which starts the due ticks' runs, once each;
- ``api``: the operator's changes (``schedule``, pause, resume, run now, backfill),
  each checked before anything is written.

Imported by ``decorator`` before Django's models are ready: nothing here
imports the models at import time (``api`` does, and is imported on use).
"""

from __future__ import annotations

from .cron import latest_tick
from .scheduler import Scheduler, check_scheduled_input, scheduled_input, scheduled_workflows, validate_schedule

__all__ = [
    "Scheduler",
    "check_scheduled_input",
    "latest_tick",
    "scheduled_input",
    "scheduled_workflows",
    "validate_schedule",
]

"""Schedules, one scheduler pass at a time in the test's thread: one run a
tick, whatever happened to that run, and one schedule's failure its own."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from orchestration import workflow
from orchestration.models import Workflow
from orchestration.retention import purge_workflows
from orchestration.schedules import Scheduler
from tests.support import drain

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def customer_service_down(data: Any) -> str:
    raise RuntimeError("the customer service is down")


# Registered in this order: the failing schedule comes before the next one.
@workflow("a_schedule_that_cannot_start", schedule="0 0 1 * *", concurrency_key=customer_service_down)
def cannot_start(ctx: Any, data: Any) -> Any:
    return data


@workflow("a_schedule_after_it", schedule="0 0 1 * *")
def after_it(ctx: Any, data: Any) -> Any:
    return data


def test_scheduler__a_tick_whose_run_was_purged_is_not_started_again_by_a_fresh_process():
    Scheduler().start_due_runs()
    drain()
    bills = Workflow.objects.filter(workflow_type="monthly_bill")
    assert list(bills.values_list("status", flat=True)) == ["completed"]
    purge_workflows(timezone.now() + datetime.timedelta(seconds=1))
    assert not bills.exists()
    Scheduler().start_due_runs()  # a process started after the purge remembers no tick
    assert not bills.exists()


def test_scheduler__a_schedule_whose_start_raises_is_logged_once_a_tick_and_the_others_start(caplog):
    scheduler = Scheduler()
    with caplog.at_level(logging.ERROR, logger="orchestration.schedules"):
        scheduler.start_due_runs()
        scheduler.start_due_runs()
    assert Workflow.objects.filter(workflow_type="a_schedule_after_it").count() == 1
    assert not Workflow.objects.filter(workflow_type="a_schedule_that_cannot_start").exists()
    [logged] = caplog.records
    assert "a_schedule_that_cannot_start" in logged.getMessage() and "customer service is down" in logged.exc_text


def test_schedule__whose_concurrency_key_function_fails_on_the_scheduled_input__is_refused_when_declared():
    with pytest.raises(ImproperlyConfigured, match=r"'keyed_by_customer'.*concurrency_key.*KeyError\('customer'\)"):
        workflow("keyed_by_customer", schedule="0 * * * *", concurrency_key=lambda data: data["customer"])(
            lambda ctx, data: None
        )


def test_scheduler__ticks_in_utc_whatever_use_tz():
    Scheduler().start_due_runs()
    tick = datetime.datetime.fromisoformat(
        Workflow.objects.get(workflow_type="monthly_bill").input_data["scheduled_for"]
    )
    assert tick.utcoffset() == datetime.timedelta(0)
    assert (tick.day, tick.hour, tick.minute) == (1, 0, 0)  # its cron, "0 0 1 * *", read in UTC
    Scheduler().start_due_runs()  # the tick's row, read back, is that tick: not started twice
    assert Workflow.objects.filter(workflow_type="monthly_bill").count() == 1

"""A worker whose clock is behind the database's: the engine compares moments
of one clock, the database's, so its timers neither spin nor end early.

The fault is the worker's: its wall clock (``django.utils.timezone.now``, in
the worker thread's process) reads two seconds behind the database server's."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from django.utils import timezone

from orchestration import start_workflow, workflow
from orchestration.models import WorkflowStatus
from tests.fault_injection.test_checkpoint_through_outage import run_until_finished

# Serial: a timer of a second and a deadline, measured on a worker that shares the machine.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.serial]

entered: list[float] = []


@workflow("fi_sleeps_a_second", max_retries=0)
def sleeps_a_second(ctx: Any, data: Any) -> Any:
    entered.append(time.monotonic())
    began = ctx.step("began", time.monotonic)
    ctx.sleep("nap", 1.0)
    return ctx.step("woke", time.monotonic) - began


@workflow("fi_sleeps_past_its_deadline", max_retries=0, timeout=1.0)
def sleeps_past_its_deadline(ctx: Any, data: Any) -> Any:
    entered.append(time.monotonic())
    ctx.sleep("nap", 60)


@pytest.fixture
def worker_clock_two_seconds_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    wall_clock = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: wall_clock() - datetime.timedelta(seconds=2))


def test_sleep__on_a_worker_whose_clock_is_behind__suspends_once_and_lasts_its_duration(
    worker_clock_two_seconds_behind,
):
    entered.clear()
    run = run_until_finished(start_workflow("fi_sleeps_a_second"))
    assert run.status == WorkflowStatus.COMPLETED
    assert run.output_data >= 1.0
    assert len(entered) == 2  # the first run, then the replay once the timer is due


def test_deadline__on_a_worker_whose_clock_is_behind__cancels_the_run_woken_for_it_at_once(
    worker_clock_two_seconds_behind,
):
    entered.clear()
    run = run_until_finished(start_workflow("fi_sleeps_past_its_deadline"))
    assert run.status == WorkflowStatus.CANCELLED and "Deadline exceeded" in run.error_message
    assert len(entered) == 1  # woken at its deadline, it is cancelled before its code runs again

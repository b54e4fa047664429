"""Schedules made and paused while real ``runworkers`` processes run: the
change holds within about a poll interval, with no restart, and each tick has
one run however many processes see it."""

from __future__ import annotations

import datetime
import itertools
import time

import pytest

from orchestration import pause_schedule, schedule
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.acceptance.test_waiting_processes import stop
from tests.support import start_workers, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def test_schedule__made_and_paused_while_three_processes_run__one_run_a_tick_none_after_the_pause(workers):
    env = worker_env(ORCHESTRATION_SCHEDULER="1")
    workers.extend(start_workers("--concurrency", "2", "--poll-interval", "0.2", env=env) for _ in range(3))
    runs = Workflow.objects.filter(idempotency_key__startswith="schedule:every-second:")
    time.sleep(2)  # the processes are up, their schedulers passing over no schedule of this name
    schedule("every-second", "echo", "* * * * * *", missed_ticks="all")  # every second, no restart
    assert wait_for(lambda: runs.count() >= 6, timeout=30, interval=0.2)
    pause_schedule("every-second")
    time.sleep(1.0)  # a pass under way when the pause committed may still start its tick
    paused_at = runs.count()
    time.sleep(2.0)  # two more ticks: none started
    assert runs.count() == paused_at
    for process in workers:
        stop(process)
    ticks = sorted(
        datetime.datetime.fromisoformat(data["scheduled_for"]) for data in runs.values_list("input_data", flat=True)
    )
    assert len(set(ticks)) == len(ticks) == runs.count()
    # Each second from the first tick to the last has its run, once.
    assert all(later - earlier == datetime.timedelta(seconds=1) for earlier, later in itertools.pairwise(ticks))

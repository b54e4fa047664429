"""Claiming ahead: while a process's runs are short, its claims keep runs
waiting for its busy threads, as many as they finish in about 50 ms (one to
four a thread); long runs turn it off, and a run left waiting too long goes
back to pending for any worker, its attempt unspent."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.core.checks import Error

from orchestration import start_workflows, workflow
from orchestration.checks import check_settings
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStatus
from orchestration.worker import CLAIM_AHEAD_WHILE_RUNS_UNDER, MOST_CLAIMED_AHEAD_A_THREAD, Outcome, Worker
from tests.support import new_work_listener

pytestmark = pytest.mark.django_db


@workflow("ahead_noop")
def noop(ctx: Any, data: Any) -> Any:
    return data


@workflow("ahead_takes")
def takes(ctx: Any, seconds: float) -> Any:
    return ctx.step("take its time", time.sleep, seconds)


def worker_after_runs_of(seconds: float | None, **options: Any) -> Worker:
    worker = Worker(concurrency=3, **options)
    if seconds is not None:
        worker.dispatcher.note_run(Outcome.COMPLETED, seconds)
    return worker


def claimed_count() -> int:
    return Workflow.objects.filter(status=WorkflowStatus.RUNNING).count()


def test_claim__after_runs_of_a_millisecond__keeps_the_most_waiting_for_each_thread_besides_the_one_asking():
    start_workflows("ahead_noop", range(40))
    worker = worker_after_runs_of(0.001)
    run = worker.dispatcher.next_run()
    ahead = 3 * MOST_CLAIMED_AHEAD_A_THREAD
    assert run is not None and len(worker.dispatcher.waiting) == ahead and claimed_count() == ahead + 1
    assert {item.lease_token for item in worker.dispatcher.waiting} <= {
        run.lease_token for run in worker.dispatcher.held.snapshot()
    }  # heartbeated while they wait


@pytest.mark.parametrize(("seconds", "a_thread"), [(0.02, 2), (0.015, 3), (0.04, 1)])
def test_claim_ahead__by_default__is_as_many_as_the_threads_finish_in_about_50_ms(seconds, a_thread):
    assert worker_after_runs_of(seconds).dispatcher.claim_ahead_now() == 3 * a_thread


def test_claim_ahead_setting__a_number__is_that_many_whatever_the_runs_take(settings):
    settings.ORCHESTRATION = {"CLAIM_AHEAD": 2}
    assert worker_after_runs_of(0.001).dispatcher.claim_ahead_now() == 2
    assert worker_after_runs_of(0.04).dispatcher.claim_ahead_now() == 2


def test_claim__before_any_run_has_finished__claims_only_for_the_threads_asking():
    start_workflows("ahead_noop", range(10))
    worker = worker_after_runs_of(None)
    assert worker.dispatcher.next_run() is not None
    assert not worker.dispatcher.waiting and claimed_count() == 1


def test_claim__after_a_long_run__claims_only_for_the_threads_asking():
    start_workflows("ahead_noop", range(10))
    worker = worker_after_runs_of(0.001)
    worker.dispatcher.note_run(Outcome.COMPLETED, 60.0)  # one long run among short ones
    assert worker.dispatcher.next_run() is not None
    assert not worker.dispatcher.waiting and claimed_count() == 1


def test_claim_ahead__stays_off_until_runs_are_short_again_on_average():
    worker = worker_after_runs_of(60.0)
    for _ in range(10):
        worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)
    assert worker.dispatcher.claim_ahead_now() == 0
    for _ in range(40):
        worker.dispatcher.note_run(Outcome.COMPLETED, 0.001)
    assert (
        worker.dispatcher.recent_run_seconds is not None
        and worker.dispatcher.recent_run_seconds < CLAIM_AHEAD_WHILE_RUNS_UNDER
    )
    assert worker.dispatcher.claim_ahead_now() == 3 * MOST_CLAIMED_AHEAD_A_THREAD


def test_claim_ahead_setting__zero__turns_claiming_ahead_off(settings):
    settings.ORCHESTRATION = {"CLAIM_AHEAD": 0}
    start_workflows("ahead_noop", range(10))
    worker = worker_after_runs_of(0.001)
    assert worker.dispatcher.next_run() is not None
    assert not worker.dispatcher.waiting and claimed_count() == 1


def test_claim_ahead_option__overrides_the_setting(settings):
    settings.ORCHESTRATION = {"CLAIM_AHEAD": 0}
    assert worker_after_runs_of(0.001, claim_ahead=1).dispatcher.claim_ahead_now() == 1


def test_runs_claimed_ahead__left_waiting_too_long__go_back_to_pending_without_spending_an_attempt():
    first, second = start_workflows("ahead_noop", [1, 2])
    worker = worker_after_runs_of(0.001)
    runs = {run.id: run for run in claims.claim(worker.worker_id, None, limit=2)}
    runs[first.pk].claimed_at -= 5.0
    worker.dispatcher.offer([runs[first.pk], runs[second.pk]])  # claimed first, waited longest
    worker.dispatcher.release_waiting(older_than=1.0)
    assert [run.id for run in worker.dispatcher.waiting] == [second.pk]
    released = Workflow.objects.get(pk=first.pk)
    assert (released.status, released.attempts, released.lease_token) == (WorkflowStatus.PENDING, 0, None)
    assert not released.steps.exists()  # the claim's record of step 1 is gone with it
    assert Workflow.objects.get(pk=second.pk).status == WorkflowStatus.RUNNING


@pytest.mark.django_db(transaction=True)
def test_released_run__wakes_idle_workers():
    start_workflows("ahead_noop", [1])
    (run,) = claims.claim("test-worker", None)
    with new_work_listener() as listener:
        run.release()
        assert [notice.payload for notice in listener.notifies(timeout=1.0, stop_after=1)] == ["default"]


@pytest.mark.parametrize("value", [-1, 1.5, "4", True])
def test_claim_ahead_setting__not_a_whole_number_of_zero_or_more__is_a_system_check_error(settings, value):
    settings.ORCHESTRATION = {"CLAIM_AHEAD": value}
    errors = [problem for problem in check_settings() if isinstance(problem, Error)]
    assert [error.id for error in errors] == ["orchestration.E006"]
    assert "CLAIM_AHEAD" in errors[0].msg


@pytest.mark.django_db(transaction=True)
def test_runs_claimed_ahead__behind_a_long_run__go_back_after_a_second_and_run_after_it(caplog):
    start_workflows("ahead_takes", [0, 0, 0])  # short runs: the process claims ahead
    slow = start_workflows("ahead_takes", [2.0])[0]
    late = start_workflows("ahead_takes", [0, 0])  # claimed ahead while the slow run holds the only thread
    with caplog.at_level(logging.WARNING, logger="orchestration"):
        Worker(concurrency=1, claim_ahead=2, burst=True, listen=False, poll_interval=0.1).run()
    assert set(Workflow.objects.values_list("status", flat=True)) == {WorkflowStatus.COMPLETED}
    released = {record.args[0] for record in caplog.records if "released to pending" in record.getMessage()}
    assert released == {workflow.pk for workflow in late}
    assert [Workflow.objects.get(pk=workflow.pk).attempts for workflow in late] == [1, 1]  # the wait spent none
    assert Workflow.objects.get(pk=slow.pk).attempts == 1


def test_runs_claimed_ahead_for_a_burst__wake_the_idle_threads_to_take_them():
    start_workflows("ahead_noop", range(3))  # fewer than the claim asks for: nothing more to claim
    worker = worker_after_runs_of(0.001, poll_interval=30)
    woken: list[float] = []
    idle = threading.Thread(target=lambda: (worker.dispatcher.idle(), woken.append(time.monotonic())))
    idle.start()
    time.sleep(0.2)  # idling, as threads do between polls
    asked = time.monotonic()
    assert worker.dispatcher.next_run() is not None and len(worker.dispatcher.waiting) == 2
    idle.join(timeout=5)
    assert woken and woken[0] - asked < 2  # woken at once, not at its next poll 30 seconds on

"""``ctx.set_progress`` and its readers against a real PostgreSQL: what is
stored and when, the fence of the run's lease, coalescing, bad values, and
the waiters told of each new value (``wait_for_result(..., on_progress=...)``)."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from orchestration import aget_result, send_event, start_workflow, wait_for_result
from orchestration.models import Workflow
from orchestration.worker.execution import Outcome
from tests.support import drain, later, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def drain_something() -> None:
    """``drain`` until it ran a run: its claim skips a row another connection
    holds for a moment (the waiter marking it awaited), as a worker's does."""
    while not drain():
        time.sleep(0.05)


def progress_writes(queries: CaptureQueriesContext) -> int:
    return sum(1 for query in queries.captured_queries if "SET progress" in query["sql"])


def test_progress__is_null_until_the_run_reports_it():
    run = start_workflow("echo", {"n": 1})
    drain()
    assert Workflow.objects.get(pk=run.pk).progress is None


def test_set_progress__in_the_body__is_stored_before_the_run_waits():
    run = start_workflow("reports_then_waits")
    assert drain() == [Outcome.WAITING]
    assert Workflow.objects.get(pk=run.pk).progress == {"done": 1, "total": 2, "message": "waiting for go"}


def test_set_progress__the_last_report_of_a_step_lands__with_about_one_write_a_second():
    run = start_workflow("reports_often", {"reports": 300, "pause": 0.005})  # 300 reports over 1.5 s or more
    with CaptureQueriesContext(connection) as queries:
        assert drain() == [Outcome.COMPLETED]
    assert Workflow.objects.get(pk=run.pk).progress == {"done": 300, "total": 300}
    assert 2 <= progress_writes(queries) <= 4  # the first at once, one a second, the last with the checkpoint


def test_set_progress__in_a_step_under_a_time_limit__lands_from_the_steps_own_thread():
    run = start_workflow("reports_in_a_timed_step")
    assert drain() == [Outcome.COMPLETED]
    assert Workflow.objects.get(pk=run.pk).progress == {"done": 3, "total": 3}


def test_set_progress__by_a_worker_that_lost_the_run__writes_nothing():
    run = start_workflow("reports_after_losing_its_run")
    assert drain() == [Outcome.ABANDONED]
    run.refresh_from_db()
    assert run.status == "cancelled" and run.progress is None


def test_set_progress__a_value_that_is_not_a_small_json_object__is_a_clear_error_and_the_run_goes_on():
    run = start_workflow("reports_badly")
    assert drain() == [Outcome.COMPLETED]
    run.refresh_from_db()
    assert run.progress == {"done": 1, "total": 1}
    list_, text, not_json, oversized = run.output_data
    assert "takes a JSON object (a dict)" in list_ and "not list" in list_
    assert "not str '50%'" in text
    assert "is not JSON-serialisable" in not_json
    assert "over the 8192-byte limit" in oversized


def test_set_progress__in_an_async_workflow_and_its_async_steps__lands_its_last_value():
    run = start_workflow("async_reports")
    assert drain() == [Outcome.COMPLETED]
    assert Workflow.objects.get(pk=run.pk).progress == {"done": 3, "total": 3, "message": "done"}


def test_wait_for_result__calls_on_progress_with_each_new_value_while_it_waits():
    run = start_workflow("reports_then_waits")
    seen: list[dict] = []
    threads = [later(0, drain_something)]

    def on_progress(details: dict) -> None:
        seen.append(details)
        if details["done"] == 1:  # woken by the first report: once the run waits, let it go on
            first = threads[0]
            threads.append(later(0, lambda: (first.join(), send_event(run.pk, "go"), drain())))

    assert wait_for_result(run, timeout=20, on_progress=on_progress) == "went"
    for thread in threads:
        thread.join()
    assert [details["done"] for details in seen] == [1, 2]


def test_workflow_wait_for_result__hands_on_progress_the_value_stored_when_the_wait_starts():
    run = start_workflow("reports_then_waits")
    drain()
    seen: list[dict] = []
    with pytest.raises(TimeoutError):
        Workflow.objects.get(pk=run.pk).wait_for_result(timeout=0.2, on_progress=seen.append)
    assert seen == [{"done": 1, "total": 2, "message": "waiting for go"}]


def test_aget_result__awaits_a_coroutine_on_progress_with_each_new_value():
    run = start_workflow("reports_then_waits")
    drain()
    seen: list[int] = []

    async def on_progress(details: dict) -> None:
        seen.append(details["done"])

    async def main() -> object:
        waiting = asyncio.ensure_future(aget_result(run, timeout=20, on_progress=on_progress))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lambda: (send_event(run.pk, "go"), drain(), connections.close_all()))
        return await waiting

    assert run_async(main()) == "went"
    assert seen == [1, 2]


def test_wait_for_result__an_on_progress_that_is_not_callable_is_a_clear_error():
    run = start_workflow("echo", {"n": 1})
    with pytest.raises(Exception, match="on_progress must be callable"):
        wait_for_result(run, timeout=0, on_progress="print")
    assert not Workflow.objects.get(pk=run.pk).awaited

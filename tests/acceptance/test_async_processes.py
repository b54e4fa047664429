"""Async workflows and callers with real ``runworkers`` processes: a crash in
the middle of an async workflow, sync and async runs in one process, 200 callers
awaiting results, and an async view that starts a run and awaits its output."""

from __future__ import annotations

import asyncio
import signal

import pytest
from django.http import JsonResponse
from django.test import AsyncClient, override_settings
from django.urls import path

from orchestration import aget_result, astart_workflow, cancel_workflow, start_workflow, start_workflows
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import run_async, run_burst, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


async def start_and_await(request) -> JsonResponse:
    run = await astart_workflow("echo", {"from": "an async view"})
    return JsonResponse({"id": str(run.pk), "output": await aget_result(run, timeout=30)})


urlpatterns = [path("start-and-await/", start_and_await)]


def test_async_workflow__killed_mid_run_resumes_after_its_last_completed_step_on_another_process(workers):
    run = start_workflow("async_three_steps", {"sleep": 0.5})
    first = start_workers("--concurrency", "1", "--poll-interval", "0.2")
    workers.append(first)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=run.pk, step_number=2).exists(), timeout=30)
    first.send_signal(signal.SIGKILL)  # in step 2: step 1's checkpoint was written with step 2's start
    first.wait(timeout=10)
    second = start_workers(
        "--concurrency", "1", "--poll-interval", "0.2", env=worker_env(ORCHESTRATION_STUCK_AFTER="2")
    )
    workers.append(second)
    assert wait_for(lambda: Workflow.objects.get(pk=run.pk).status == "completed", timeout=60, interval=0.2)
    assert Workflow.objects.get(pk=run.pk).output_data == {"steps": [1, 2, 3], "input": {"sleep": 0.5}}
    ran = list(StepRun.objects.filter(workflow_id=run.pk).order_by("id").values_list("step_number", "pid"))
    assert ran == [(1, first.pid), (2, first.pid), (2, second.pid), (3, second.pid)]


def test_async_step__of_a_run_cancelled_meanwhile_is_cancelled_and_the_worker_takes_other_work(workers):
    run = start_workflow("async_cancellable")
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.2"))
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=run.pk, label="started").exists(), timeout=30)
    cancel_workflow(run, "not needed")
    # The heartbeat (every second here) finds the lease lost; the body is cancelled, not left running.
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=run.pk, label="cancelled").exists(), timeout=10)
    other = start_workflow("echo", "next")
    assert wait_for(lambda: Workflow.objects.get(pk=other.pk).status == "completed", timeout=10)
    assert Workflow.objects.get(pk=run.pk).status == "cancelled"


def test_sync_and_async_workflows__run_side_by_side_in_one_runworkers_process():
    sync_runs = start_workflows("three_steps", [{"n": n} for n in range(10)])
    async_runs = start_workflows("async_three_steps", [{"n": n} for n in range(10)])
    result = run_burst("--concurrency", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    for runs in (sync_runs, async_runs):
        finished = Workflow.objects.filter(pk__in=[r.pk for r in runs])
        assert sorted(w.output_data["input"]["n"] for w in finished if w.status == "completed") == list(range(10))
    assert StepRun.objects.values("pid").distinct().count() == 1
    assert StepRun.objects.count() == 60  # every step of both kinds ran once


def test_aget_result__200_callers_in_one_process_each_get_the_result_finished_by_a_runworkers_process(workers):
    runs = start_workflows("echo", [{"n": n} for n in range(200)])

    async def main() -> list[object]:
        waiting = [asyncio.ensure_future(aget_result(run, timeout=60)) for run in runs]
        await asyncio.sleep(0.2)  # most are waiting before a worker starts, some after
        workers.append(start_workers("--concurrency", "4", "--poll-interval", "0.2"))
        return await asyncio.gather(*waiting)

    assert run_async(main()) == [{"n": n} for n in range(200)]


@override_settings(ROOT_URLCONF=__name__)
def test_async_view__starts_a_workflow_and_awaits_its_result(workers):
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.2"))
    response = run_async(AsyncClient().get("/start-and-await/"))
    assert response.status_code == 200
    body = response.json()
    assert body["output"] == {"from": "an async view"}
    assert Workflow.objects.get(pk=body["id"]).status == "completed"

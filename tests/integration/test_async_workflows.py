"""``async def`` workflows and steps, run by the worker's execution in the
test's thread: checkpoints, replay, waits and step timeouts, as sync ones."""

from __future__ import annotations

import time

import pytest

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStep
from orchestration.worker import Outcome
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db


def test_async_workflow__runs_its_async_steps_and_checkpoints_each():
    run = start_workflow("async_three_steps", {"n": 1})
    assert drain() == [Outcome.COMPLETED]
    run.refresh_from_db()
    assert run.status == "completed" and run.output_data == {"steps": [1, 2, 3], "input": {"n": 1}}
    steps = WorkflowStep.objects.filter(workflow=run).order_by("step_number")
    assert [(s.step_name, s.status, s.output_data["step"]) for s in steps] == [
        ("a", "completed", 1),
        ("b", "completed", 2),
        ("c", "completed", 3),
    ]


def test_async_workflow__retried_and_woken_from_a_sleep_replays_completed_steps_without_running_them():
    run = start_workflow("async_mixed", {"nap": 0.2})
    # The sync step fails on the first attempt; the retry sleeps.
    assert drain() == [Outcome.RETRYING, Outcome.WAITING]
    time.sleep(0.3)
    Workflow.objects.filter(pk=run.pk).update(run_after=None)  # due now (the test's transaction has one clock)
    assert drain() == [Outcome.COMPLETED]
    assert Workflow.objects.get(pk=run.pk).output_data == [1, 2, 4]
    ran = list(StepRun.objects.filter(workflow_id=run.pk).order_by("id").values_list("step_number", flat=True))
    assert ran == [1, 2, 2, 4]  # step 1 once, step 2 on each attempt, step 4 once


def test_async_step__past_its_timeout_is_cancelled_and_fails_the_attempt():
    run = start_workflow("async_slow_step", {"seconds": 30, "timeout": 0.2})
    assert drain() == [Outcome.FAILED]
    run.refresh_from_db()
    assert "StepTimeout" in run.error_message and "cancelled" in run.error_message


@pytest.mark.parametrize(
    ("workflow_type", "said"),
    [
        ("sync_with_an_async_step", "an async step runs in an `async def` workflow"),  # a plain workflow's ctx.step
        ("async_atomic_step_of_an_async_body", "atomic_step runs a plain function"),
    ],
)
def test_async_body_where_a_plain_function_runs__fails_the_run_at_once_saying_where_it_belongs(workflow_type, said):
    run = start_workflow(workflow_type)
    assert drain() == [Outcome.FAILED]
    run.refresh_from_db()
    assert run.attempts == 1
    assert f"Step 1 'a' returned an awaitable: {said}" in run.error_message
    assert not StepRun.objects.filter(workflow_id=run.pk).exists()


def test_async_workflow__awaits_ctx_patched_and_records_the_patch_as_a_sync_workflow_does():
    run = start_workflow("async_patched")
    assert drain() == [Outcome.COMPLETED]
    run.refresh_from_db()
    assert (run.output_data, run.patches) == ({"new": True, "step": "v2"}, {"async-v2": 1})


def test_async_workflow__ctx_patched_used_without_await_fails_the_run_at_once_saying_to_await_it():
    run = start_workflow("async_patched_not_awaited")
    assert drain() == [Outcome.FAILED]
    run.refresh_from_db()
    assert run.attempts == 1 and run.patches is None
    assert "await ctx.patched('async-v2')" in run.error_message


def test_async_workflow__awaiting_outside_any_step_past_its_deadline_is_cancelled_there():
    run = start_workflow("async_nap_outside_steps", {"seconds": 30}, timeout=0.3)
    started = time.monotonic()
    assert drain() == [Outcome.CANCELLED]
    assert time.monotonic() - started < 5  # not after its 30 s nap
    assert Workflow.objects.get(pk=run.pk).status == "cancelled"
    assert not StepRun.objects.filter(workflow_id=run.pk).exists()

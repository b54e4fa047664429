"""wait_for_result and aget_result against a real PostgreSQL: each outcome of
the run waited for, bad input, and the NOTIFY only an awaited run's end sends.
The runs are finished here, by the test's own worker calls or an operator's
move from another thread, as any other process would finish them."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from django.db import connections, transaction

from orchestration import (
    InvalidWorkflowInput,
    OrchestrationError,
    WorkflowCancelled,
    WorkflowFailed,
    aget_result,
    cancel_workflow,
    start_workflow,
    wait_for_result,
)
from orchestration.listen import RESULT_CHANNEL
from orchestration.models import Workflow
from tests.support import drain, later, other_connection, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def test_wait_for_result__returns_the_output_of_a_completed_run():
    run = start_workflow("echo", {"n": 7})
    drain()
    assert wait_for_result(run) == {"n": 7}
    assert wait_for_result(str(run.pk), timeout=0) == {"n": 7}


def test_wait_for_result__a_run_already_finished_is_not_marked_awaited():
    run = start_workflow("echo", {"n": 1})
    drain()
    run.wait_for_result()
    assert not Workflow.objects.get(pk=run.pk).awaited


def test_wait_for_result__is_woken_when_another_connection_cancels_the_run():
    run = start_workflow("echo", {"n": 1})
    thread = later(0.3, lambda: cancel_workflow(run.pk, "no longer needed"))
    with pytest.raises(WorkflowCancelled, match="no longer needed"):
        wait_for_result(run, timeout=10)
    thread.join()
    assert Workflow.objects.get(pk=run.pk).awaited


def test_wait_for_result__a_run_deleted_while_awaited__ends_the_wait_with_does_not_exist():
    run = start_workflow("echo", {"n": 1})
    thread = later(0.3, lambda: Workflow.objects.filter(pk=run.pk).delete())
    started = time.monotonic()
    with pytest.raises(Workflow.DoesNotExist, match=f"No workflow {run.pk} to wait for"):
        wait_for_result(run, timeout=10)
    thread.join()
    assert time.monotonic() - started < 5, "woken by the delete, not by the timeout"


def test_aget_result__a_run_deleted_while_awaited__ends_the_wait_with_does_not_exist():
    run = start_workflow("echo", {"n": 1})
    thread = later(0.3, lambda: Workflow.objects.filter(pk=run.pk).delete())
    started = time.monotonic()
    with pytest.raises(Workflow.DoesNotExist, match=f"No workflow {run.pk} to wait for"):
        run_async(aget_result(run, timeout=10))
    thread.join()
    assert time.monotonic() - started < 5, "woken by the delete, not by the timeout"


def test_wait_for_result__raises_workflow_failed_with_the_runs_error():
    run = start_workflow("permanent_failure")
    drain()
    with pytest.raises(WorkflowFailed, match="card declined") as failed:
        wait_for_result(run, timeout=1)
    assert failed.value.workflow_id == run.pk
    assert failed.value.error_message == Workflow.objects.get(pk=run.pk).error_message


def test_wait_for_result__raises_timeout_error_when_the_run_does_not_finish_in_time():
    run = start_workflow("echo", {"n": 1})
    with pytest.raises(TimeoutError, match=str(run.pk)):
        wait_for_result(run, timeout=0.2)


def test_wait_for_result__a_run_that_does_not_exist_is_a_clear_error_and_writes_nothing():
    missing = uuid.uuid4()
    with pytest.raises(Workflow.DoesNotExist, match=f"No workflow {missing} to wait for"):
        wait_for_result(missing, timeout=1)
    with pytest.raises(InvalidWorkflowInput, match="neither a workflow nor a workflow id"):
        wait_for_result("not-an-id")
    assert not Workflow.objects.exists()


def test_wait_for_result__a_negative_timeout_is_a_clear_error_and_writes_nothing():
    run = start_workflow("echo", {"n": 1})
    with pytest.raises(InvalidWorkflowInput, match="wait_for_result timeout must be"):
        wait_for_result(run, timeout=-1)
    assert not Workflow.objects.get(pk=run.pk).awaited


def test_wait_for_result__inside_a_transaction_is_refused():
    with transaction.atomic():
        run = start_workflow("echo", {"n": 1})
        with pytest.raises(OrchestrationError, match=r"inside transaction\.atomic"):
            wait_for_result(run, timeout=1)


def test_completion__sends_a_notify_only_for_a_run_someone_waits_for():
    waited, ignored = start_workflow("echo", {"n": 1}), start_workflow("echo", {"n": 2})
    with other_connection() as listener:
        listener.execute(f"LISTEN {RESULT_CHANNEL}")
        with pytest.raises(TimeoutError):
            wait_for_result(waited, timeout=0.2)  # marks it awaited
        drain()
        payloads = [notice.payload for notice in listener.notifies(timeout=0.5)]
    assert [payload for payload in payloads if not payload.startswith("probe:")] == [str(waited.pk)], ignored.pk


def test_aget_result__awaits_the_output_of_a_run_finished_meanwhile():
    run = start_workflow("echo", {"n": 3})

    async def main() -> object:
        waiting = asyncio.ensure_future(aget_result(run, timeout=10))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await asyncio.to_thread(lambda: (drain(), connections.close_all()))
        return await waiting

    assert run_async(main()) == {"n": 3}

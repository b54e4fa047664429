"""A ``BaseException`` from user code (``KeyboardInterrupt``, ``SystemExit``, a
library's own) fails the attempt like any error: the run is retried, the step
is marked failed, and the worker thread lives on."""

from __future__ import annotations

import pytest

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStep
from tests.acceptance.test_runworkers import wait_for
from tests.support import run_burst, start_workers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "LibraryAbort"])
def test_base_exception__in_a_step_fails_the_attempt_and_the_retry_completes(workers, kind):
    workflow = start_workflow("interrupted_step", {"kind": kind})
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=20)
    workflow.refresh_from_db()
    assert (workflow.attempts, workflow.output_data) == (2, {"attempt": 2})


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit", "LibraryAbort"])
def test_base_exception__in_a_step_marks_the_step_failed_with_it(kind):
    workflow = start_workflow("interrupted_step", {"kind": kind}, max_retries=0)
    result = run_burst("--concurrency", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    workflow.refresh_from_db()
    step = WorkflowStep.objects.get(workflow=workflow, step_number=1)
    assert (workflow.status, step.status) == ("failed", "failed"), result.stderr
    assert step.error_message == f"{kind}: {kind} from a step"
    assert workflow.error_message.startswith(f'Step 1 "interrupted" failed: {kind}')


def test_base_exception__from_the_workflow_function_fails_the_attempt_and_the_retry_completes(workers):
    workflow = start_workflow("interrupted_function", {"kind": "LibraryAbort"})
    workers.append(start_workers("--concurrency", "1"))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=20)
    workflow.refresh_from_db()
    assert (workflow.attempts, workflow.output_data) == (2, {"attempt": 2})

"""The operator's repairs do what they say: a repaired run gets its time limit afresh."""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from orchestration import (
    restart_workflow,
    retry_workflow,
    start_workflow,
)
from orchestration.api import retry_from_step, skip_step
from orchestration.models import Workflow
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = pytest.mark.django_db

#: The runs' time limit, in seconds: long enough for a drain of a few steps, short to wait out.
TIMEOUT = 1.0


def cancelled_by_its_deadline() -> Workflow:
    workflow = start_workflow("three_steps", timeout=TIMEOUT)
    time.sleep(TIMEOUT + 0.05)
    assert drain() == ["cancelled"]
    workflow.refresh_from_db()
    assert workflow.error_message.startswith("Deadline exceeded")
    return workflow


def test_retry_workflow__of_a_run_cancelled_by_its_deadline_runs_with_a_fresh_deadline():
    workflow = cancelled_by_its_deadline()
    retry_workflow(workflow)
    assert drain() == ["completed"]


def test_retry_workflow__of_a_row_without_a_timeout_takes_its_limit_from_its_first_deadline():
    created = timezone.now() - datetime.timedelta(minutes=1)
    legacy = WorkflowFactory(status="cancelled", created_at=created, deadline=created + datetime.timedelta(seconds=5))
    before = timezone.now()
    retried = retry_workflow(legacy)
    assert before + datetime.timedelta(seconds=4) < retried.deadline < timezone.now() + datetime.timedelta(seconds=6)
    assert drain() == ["completed"]


def test_retry_from_step__of_a_run_cancelled_by_its_deadline_runs_with_a_fresh_deadline():
    workflow = cancelled_by_its_deadline()
    retry_from_step(workflow, 1)
    assert drain() == ["completed"]


def test_restart_workflow__of_a_run_with_a_timeout_runs_with_a_fresh_deadline():
    workflow = start_workflow("three_steps", timeout=TIMEOUT)
    assert drain() == ["completed"]
    time.sleep(TIMEOUT + 0.05)
    restart_workflow(workflow)
    assert drain() == ["completed"]


def test_skip_step__of_a_failed_run_past_its_deadline_runs_with_a_fresh_deadline():
    workflow = start_workflow("flaky", {"succeed_on": 99}, max_retries=0, timeout=TIMEOUT)
    assert drain() == ["failed"]
    time.sleep(TIMEOUT + 0.05)
    skip_step(workflow, 2, {"attempt": 0})
    assert drain() == ["completed"]
    workflow.refresh_from_db()
    assert workflow.output_data == {"attempt": 0}

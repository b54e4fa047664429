"""Every attempt's error is kept on its run (``error_history``), newest first and
bounded, by the moves that record an error; a success keeps it."""

import pytest

from orchestration import cancel_workflow, retry_workflow, start_workflow
from orchestration.models import Workflow
from orchestration.transitions import ERROR_HISTORY_LIMIT, fail
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = pytest.mark.django_db


def test_error_history__keeps_each_failed_attempt_and_survives_the_success_that_follows():
    workflow = start_workflow("flaky", {"succeed_on": 3})
    assert drain() == ["retrying", "retrying", "completed"]
    workflow.refresh_from_db()
    assert workflow.error_message is None  # the latest error is cleared by the success...
    history = workflow.error_history  # ...the history is not
    assert [entry["message"] for entry in history] == [
        'Step 2 "flaky call" failed: ConnectionError: flaky failure on attempt 2',
        'Step 2 "flaky call" failed: ConnectionError: flaky failure on attempt 1',
    ]
    assert [(entry["attempt"], entry["step"], entry["status"]) for entry in history] == [
        (2, 2, "pending"),
        (1, 2, "pending"),
    ]
    assert all(entry["at"] for entry in history)


def test_error_history__records_an_operators_cancel_and_keeps_it_through_a_retry():
    workflow = WorkflowFactory(status="pending")
    cancel_workflow(workflow, "Wrong customer.")
    retry_workflow(workflow)
    workflow.refresh_from_db()
    assert [(entry["message"], entry["status"]) for entry in workflow.error_history] == [
        ("Wrong customer.", "cancelled")
    ]


def test_error_history__keeps_the_latest_errors_only():
    workflow = WorkflowFactory(status="running")
    rows = Workflow.objects.filter(pk=workflow.pk)
    for number in range(ERROR_HISTORY_LIMIT + 5):
        rows.update(status="running")
        fail(rows, f"error {number}", None)
    workflow.refresh_from_db()
    messages = [entry["message"] for entry in workflow.error_history]
    assert len(messages) == ERROR_HISTORY_LIMIT
    assert messages[0] == f"error {ERROR_HISTORY_LIMIT + 4}" and messages[-1] == "error 5"

"""The Tasks backend: enqueue and get_result against the workflow rows, tasks run
in the test's thread by the same code as a worker's (``drain``)."""

from __future__ import annotations

import datetime
import json
import sys

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from orchestration import InvalidWorkflowInput, cancel_workflow, pause_workflow, retry_workflow, start_workflow
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStep
from orchestration.tasks import TASK_WORKFLOW_TYPE, UnknownTask, WorkflowBackend
from orchestration.validation import NotJSONSerializable
from tests.support import drain
from tests.testapp import tasks

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def row_of(result) -> Workflow:
    return Workflow.objects.get(pk=result.id)


def test_enqueue__stores_a_pending_one_step_workflow_and_returns_a_ready_result():
    result = tasks.add.enqueue(2, b=3)
    assert isinstance(task_backends["default"], WorkflowBackend)
    assert (result.status, result.args, result.kwargs, result.backend) == (
        TaskResultStatus.READY,
        [2],
        {"b": 3},
        "default",
    )
    assert result.task == tasks.add and result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.last_attempted_at, result.attempts) == (None, None, None, 0)
    row = row_of(result)
    assert (row.workflow_type, row.status, row.queue, row.priority) == (TASK_WORKFLOW_TYPE, "pending", "default", 0)
    assert row.input_data == {
        "task": "tests.testapp.tasks.add",
        "args": [2],
        "kwargs": {"b": 3},
        "backend": "default",
        "run_after": None,
    }
    assert row.max_retries == 3  # ORCHESTRATION's DEFAULT_MAX_RETRIES


def test_get_result__reads_a_successful_run_back():
    result = tasks.add.enqueue(2, 3)
    assert drain() == ["completed"]
    done = tasks.add.get_result(result.id)
    assert (done.status, done.return_value, done.errors, done.attempts) == (TaskResultStatus.SUCCESSFUL, 5, [], 1)
    assert done.worker_ids == ["test-worker"]
    assert done.enqueued_at <= done.started_at <= done.last_attempted_at <= done.finished_at
    step = WorkflowStep.objects.get(workflow_id=result.id)
    assert (step.step_number, step.step_name, step.output_data) == (1, "tests.testapp.tasks.add", 5)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


def test_failure__retries_then_fails_with_the_exception_class_path_and_traceback_text():
    result = tasks.decline.enqueue("card declined")
    assert drain() == ["retrying", "retrying", "retrying", "failed"]
    failed = default_task_backend.get_result(result.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 4)
    assert failed.finished_at is not None
    [error] = failed.errors
    assert error.exception_class_path == "tests.testapp.tasks.Declined"
    assert error.exception_class is tasks.Declined
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "in decline\n    raise Declined(reason)" in error.traceback
    assert error.traceback.rstrip().endswith("tests.testapp.tasks.Declined: card declined")
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value


def test_retries__a_flaky_task_succeeds_on_a_later_attempt():
    result = tasks.flaky.enqueue(3)
    assert drain() == ["retrying", "retrying", "completed"]
    done = result.task.get_result(result.id)
    assert (done.status, done.return_value, done.attempts, done.errors) == (
        TaskResultStatus.SUCCESSFUL,
        {"attempt": 3},
        3,
        [],
    )


def test_get_result__of_a_paused_task_is_ready():
    result = tasks.add.enqueue(2, 3)
    pause_workflow(result.id)
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY


def test_pending_retry__is_ready_with_the_last_attempts_error():
    from orchestration.worker import execute

    result = tasks.flaky.enqueue(2)
    assert execute(claims.claim("w1", None)[0]) == "retrying"
    waiting = default_task_backend.get_result(result.id)
    assert (waiting.status, waiting.attempts, waiting.worker_ids) == (TaskResultStatus.READY, 1, ["w1"])
    assert [error.exception_class_path for error in waiting.errors] == ["builtins.ConnectionError"]
    assert "ConnectionError: flaky failure on attempt 1" in waiting.errors[0].traceback


def test_pending_retry__after_its_worker_died__reports_the_engines_error_not_the_older_attempts_class():
    from orchestration import transitions
    from orchestration.worker import execute

    result = tasks.flaky.enqueue(3)
    assert execute(claims.claim("w1", None)[0]) == "retrying"
    assert row_of(result).error_class == "builtins.ConnectionError"
    rows = Workflow.objects.filter(pk=result.id)
    rows.update(status="running")  # claimed again, by a worker that then died
    assert transitions.requeue_stuck(rows, "its worker stopped answering") == 1
    [error] = default_task_backend.get_result(result.id).errors
    assert (error.exception_class_path, error.traceback) == (
        "orchestration.errors.OrchestrationError",
        "its worker stopped answering",
    )


def test_backend_options__max_retries_0_fails_at_the_first_error():
    result = tasks.decline.using(backend="no_retries").enqueue("no")
    assert row_of(result).max_retries == 0
    assert drain() == ["failed"]
    assert task_backends["no_retries"].get_result(result.id).attempts == 1


@pytest.mark.parametrize(
    ("task", "args", "exception_class_path"),
    [
        (tasks.decline_permanently, ["card declined"], "orchestration.errors.PermanentError"),
        (tasks.returns_a_set, [], "orchestration.validation.NotJSONSerializable"),
    ],
)
def test_permanent_errors__fail_without_retries(task, args, exception_class_path):
    result = task.enqueue(*args)
    assert drain() == ["failed"]
    failed = default_task_backend.get_result(result.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    assert [error.exception_class_path for error in failed.errors] == [exception_class_path]


def test_operator_retry__sends_a_failed_task_back_to_ready_with_fresh_attempts():
    result = tasks.decline.using(backend="no_retries").enqueue("no")
    assert drain() == ["failed"]
    retry_workflow(result.id)  # what the admin's retry action calls
    ready = default_task_backend.get_result(result.id)
    assert (ready.status, ready.attempts, ready.errors) == (TaskResultStatus.READY, 0, [])
    assert drain() == ["failed"]
    assert default_task_backend.get_result(result.id).attempts == 1


def test_cancelled_task__is_failed_with_workflow_cancelled():
    result = tasks.add.enqueue(1, 2)
    cancel_workflow(result.id, reason="not needed")
    cancelled = default_task_backend.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    [error] = cancelled.errors
    assert (error.exception_class_path, error.traceback) == ("orchestration.errors.WorkflowCancelled", "not needed")


def test_takes_context__receives_the_running_result_and_the_attempt():
    result = tasks.remember.enqueue("ctx")
    assert drain() == ["completed"]
    value = default_task_backend.get_result(result.id).return_value
    assert value == {
        "label": "ctx",
        "id": result.id,
        "attempt": 1,
        "status": "RUNNING",
        "queue": "default",
        "priority": 0,
    }


def test_priority_queue_and_run_after__are_the_workflow_rows_own():
    later = timezone.now() + datetime.timedelta(hours=1)
    result = tasks.add.using(priority=100, queue_name="emails", run_after=later).enqueue(1, 1)
    row = row_of(result)
    assert (row.priority, row.queue, row.run_after) == (100, "emails", later)
    again = default_task_backend.get_result(result.id)
    assert (again.task.priority, again.task.queue_name, again.task.run_after) == (100, "emails", later)
    assert tasks.add.using(priority=-100).enqueue(1, 1).task.priority == -100


def test_invalid_priority_and_queue__are_refused_by_the_backend():
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'unknown' is not valid"):
        tasks.add.using(queue_name="unknown")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([{1, 2}], {}, r"Argument 0 of task 'tests.testapp.tasks.add' is not JSON-serialisable"),
        ([1], {"b": object()}, r"Keyword argument 'b' of task 'tests.testapp.tasks.add' is not JSON-serialisable"),
        ([float("nan"), 1], {}, r"Argument 0 of task 'tests.testapp.tasks.add' is not JSON-serialisable"),
    ],
)
def test_arguments_that_are_not_json__are_refused_before_anything_is_written(args, kwargs, message):
    with pytest.raises(NotJSONSerializable, match=message) as raised:
        tasks.add.enqueue(*args, **kwargs)
    assert isinstance(raised.value, TypeError | ValueError)
    assert not Workflow.objects.exists()


def test_arguments__are_stored_as_django_normalises_them():
    result = tasks.add.enqueue((1, 2), b=b"bytes")
    assert (result.args, result.kwargs) == ([[1, 2]], {"b": "bytes"})
    assert row_of(result).input_data["args"] == [[1, 2]]


def test_enqueue_in_a_rolled_back_transaction__leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert row_of(result).status == "pending"
        raise RuntimeError("roll back")
    assert not Workflow.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


@pytest.mark.parametrize("result_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_get_result__of_an_unknown_id_does_not_exist(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_get_result__of_a_workflow_that_is_not_a_task_does_not_exist():
    workflow = start_workflow("echo", 1)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(workflow.pk))


def test_task_get_result__of_another_task_is_a_mismatch():
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.decline.get_result(result.id)


def test_aenqueue_and_aget_result():
    result = async_to_sync(tasks.add.aenqueue)(4, 5)
    assert drain() == ["completed"]
    assert async_to_sync(tasks.add.aget_result)(result.id).return_value == 9


def test_async_task__runs():
    result = tasks.async_add.enqueue(4, 5)
    assert drain() == ["completed"]
    assert default_task_backend.get_result(result.id).return_value == 9


def test_row_inserted_by_sql_with_only_a_task_path__runs():
    workflow = Workflow.objects.create(
        workflow_type=TASK_WORKFLOW_TYPE, input_data={"task": "tests.testapp.tasks.add", "args": [1, 2]}
    )
    assert drain() == ["completed"]
    assert default_task_backend.get_result(str(workflow.pk)).return_value == 3


def test_unknown_task_path__fails_at_once_naming_it():
    gone = {"task": "tests.testapp.tasks.gone"}
    workflow = Workflow.objects.create(workflow_type=TASK_WORKFLOW_TYPE, input_data=gone)
    assert drain() == ["failed"]
    workflow.refresh_from_db()
    assert "Task 'tests.testapp.tasks.gone' is not registered in this process" in workflow.error_message


def test_start_workflow__refuses_the_reserved_tasks_type():
    with pytest.raises(InvalidWorkflowInput, match=r"'django\.tasks' is reserved: its runs are made by the Tasks"):
        start_workflow(TASK_WORKFLOW_TYPE, {"task": "tests.testapp.tasks.add", "args": [1, 2]})
    assert not Workflow.objects.exists()


def test_stored_task_path__of_a_module_not_imported__is_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "tests.testapp.never_imported", raising=False)
    workflow = Workflow.objects.create(
        workflow_type=TASK_WORKFLOW_TYPE, input_data={"task": "tests.testapp.never_imported.anything"}
    )
    with pytest.raises(UnknownTask, match="is not registered in this process"):
        default_task_backend.get_result(str(workflow.pk))
    assert drain() == ["failed"]
    assert "tests.testapp.never_imported" not in sys.modules


def test_signals__enqueued_started_and_finished_are_sent():
    seen = []

    def receiver(signal, sender, task_result, **kwargs):
        seen.append((signal, sender, task_result.status))

    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(receiver, weak=False)
    try:
        tasks.add.enqueue(1, 2)
        drain()
    finally:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(receiver)
    assert seen == [
        (task_enqueued, WorkflowBackend, TaskResultStatus.READY),
        (task_started, WorkflowBackend, TaskResultStatus.RUNNING),
        (task_finished, WorkflowBackend, TaskResultStatus.SUCCESSFUL),
    ]


def test_signals__task_finished_only_once_the_last_attempt_failed():
    finished = []

    def receiver(sender, task_result, **kwargs):
        finished.append(
            (task_result.status, task_result.attempts, [e.exception_class_path for e in task_result.errors])
        )

    task_finished.connect(receiver, weak=False)
    try:
        tasks.decline.enqueue("no")
        drain()
    finally:
        task_finished.disconnect(receiver)
    assert finished == [(TaskResultStatus.FAILED, 4, ["tests.testapp.tasks.Declined"])]


def test_signals__task_finished_reads_the_return_value_as_get_result_does():
    finished = []

    def receiver(sender, task_result, **kwargs):
        finished.append(json.dumps(task_result.return_value))

    task_finished.connect(receiver, weak=False)
    try:
        result = tasks.returns_awkward.enqueue()
        drain()
    finally:
        task_finished.disconnect(receiver)
    stored = json.dumps(default_task_backend.get_result(result.id).return_value)
    assert finished == [stored] == ['{"b": 10000000000000000, "aa": 0.0, "zeta": 1}']


def test_enqueue__refuses_arguments_the_task_function_cannot_take_naming_the_task_and_writing_nothing():
    refused = r"Task 'tests.testapp.tasks.add' cannot be called with these arguments: missing a required argument: 'b'"
    with pytest.raises(InvalidWorkflowInput, match=refused):
        tasks.add.enqueue(2)
    with pytest.raises(InvalidWorkflowInput, match=r"unexpected keyword argument 'c'"):
        tasks.add.enqueue(2, b=3, c=4)
    tasks.remember.enqueue("takes a context first")
    assert Workflow.objects.count() == 1

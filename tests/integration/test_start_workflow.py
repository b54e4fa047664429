import datetime
import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from orchestration import InvalidWorkflowInput, UnknownWorkflowType, start_workflow, start_workflows
from orchestration.models import Workflow, WorkflowStatus
from tests.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db


def test_start_workflow__creates_a_pending_row_with_its_input():
    workflow = start_workflow("three_steps", {"order_id": 7})
    row = Workflow.objects.get(pk=workflow.pk)
    assert (row.status, row.input_data, row.current_step, row.attempts) == ("pending", {"order_id": 7}, 0, 0)
    assert row.created_at is not None and workflow.created_at == row.created_at


def test_decorated_workflow__start_is_start_workflow():
    workflow = three_steps.start({"a": 1}, priority=3)
    assert (workflow.workflow_type, workflow.priority) == ("three_steps", 3)


def test_start_workflow__same_idempotency_key_returns_the_first_workflow():
    first = start_workflow("three_steps", {"n": 1}, idempotency_key="order-7")
    second = start_workflow("three_steps", {"n": 2}, idempotency_key="order-7")
    assert second.pk == first.pk and second.input_data == {"n": 1}
    assert Workflow.objects.filter(idempotency_key="order-7").count() == 1


def test_start_workflow__max_retries_comes_from_argument_then_decorator_then_setting(settings):
    settings.ORCHESTRATION = {"DEFAULT_MAX_RETRIES": 7}
    assert start_workflow("three_steps").max_retries == 7
    assert start_workflow("flaky", {"succeed_on": 1}).max_retries == 5
    assert start_workflow("flaky", {"succeed_on": 1}, max_retries=0).max_retries == 0


def test_start_workflow__queue_and_priority_default_to_the_decorator():
    workflow = start_workflow("on_other_queue")
    assert (workflow.queue, workflow.priority) == ("other", 5)


def test_start_workflow__unknown_type_raises_and_writes_nothing():
    with pytest.raises(UnknownWorkflowType, match="'no_such_type'"):
        start_workflow("no_such_type", {})
    assert not Workflow.objects.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(input_data={"when": datetime.datetime.now()}), "not JSON-serialisable"),
        (dict(run_after=datetime.datetime(2030, 1, 1)), "naive"),
        (dict(max_retries=-1), "max_retries"),
        (dict(queue=""), "queue"),
    ],
)
def test_start_workflow__bad_input_raises_and_writes_nothing(kwargs, message):
    with pytest.raises(InvalidWorkflowInput, match=message):
        start_workflow("three_steps", **kwargs)
    assert not Workflow.objects.exists()


def test_start_workflow__type_longer_than_the_column_is_rejected():
    with pytest.raises(InvalidWorkflowInput, match="100"):
        start_workflow("x" * 101)


def test_start_workflow__run_after_is_stored():
    later = timezone.now() + datetime.timedelta(hours=1)
    assert start_workflow("three_steps", run_after=later).run_after == later


def test_start_workflow__inside_a_rolled_back_transaction_never_exists():
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        start_workflow("three_steps", {"n": 1})
        raise Rollback
    assert not Workflow.objects.exists()


def test_row_inserted_by_plain_sql_gets_the_database_defaults():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, input_data) VALUES ('three_steps', '{}') "
            "RETURNING id, status, current_step, max_retries, attempts, queue, priority, created_at, updated_at"
        )
        row = cursor.fetchone()
    assert row[0] is not None and row[1:7] == ("pending", 0, 3, 0, "default", 0)
    assert row[7] is not None and row[8] is not None
    assert Workflow.objects.get(pk=row[0]).status == WorkflowStatus.PENDING


def test_start_workflow__ids_are_time_ordered_uuids():
    first = start_workflow("echo", 1)
    time.sleep(0.002)
    second, third = start_workflows("echo", [2, 3])
    assert {first.pk.version, second.pk.version, third.pk.version} == {7}
    assert first.pk < second.pk and first.pk < third.pk


def statements_sent(action: Any) -> list[str]:
    """The statements ``action`` sends on the default connection, as a server sees them."""
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        action()
    return sent


def test_start_workflow__is_one_statement_and_no_savepoint_in_the_callers_transaction():
    assert len(statements_sent(lambda: start_workflow("three_steps", {"n": 1}))) == 1
    with transaction.atomic():
        assert len(statements_sent(lambda: start_workflow("three_steps", {"n": 2}))) == 1


def test_start_workflow__with_a_new_key_is_one_statement_and_with_a_taken_key_two():
    assert len(statements_sent(lambda: start_workflow("three_steps", {"n": 1}, idempotency_key="k-1"))) == 1
    # The INSERT meets the key, then the run that holds it is read.
    assert len(statements_sent(lambda: start_workflow("three_steps", {"n": 2}, idempotency_key="k-1"))) == 2


def columns_of(workflow: Workflow) -> dict[str, Any]:
    return {field.attname: getattr(workflow, field.attname) for field in Workflow._meta.concrete_fields}


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"idempotency_key": "as-read"},
        {"run_after": timezone.now() + datetime.timedelta(hours=1), "timeout": 90, "priority": -3, "max_retries": 1},
        {"concurrency_key": "customer-7", "queue": "other"},
        {"idempotency_key": "debounced", "debounce": 5},
    ],
    ids=["no options", "key", "times and numbers", "concurrency key", "debounced"],
)
def test_start_workflow__returns_its_run_as_a_read_of_its_row_gives_it(options):
    started = start_workflow("on_other_queue", {"b": [1, 2.5], "a": None}, **options)
    assert columns_of(started) == columns_of(Workflow.objects.get(pk=started.pk))


def test_start_workflows__returns_each_run_as_a_read_of_its_row_gives_it():
    started = start_workflows("three_steps", [{"n": 1}, {"n": 2}], run_after=timezone.now(), priority=2)
    rows = Workflow.objects.in_bulk([workflow.pk for workflow in started])
    assert [columns_of(workflow) for workflow in started] == [columns_of(rows[workflow.pk]) for workflow in started]

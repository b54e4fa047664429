"""Declared input: ``@workflow(..., input=...)`` checked at every start before
anything is written, and the checked value given to the workflow function."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection

from orchestration import InvalidWorkflowInput, start_workflow, start_workflows, workflow
from orchestration.models import Workflow, WorkflowStatus
from tests.support import drain
from tests.testapp.workflows import Shipment

pytestmark = pytest.mark.django_db


def test_start_workflow__refuses_what_its_model_refuses_naming_the_workflow_and_the_field():
    with pytest.raises(InvalidWorkflowInput) as refused:
        start_workflow("ship_order", "hello")
    assert "workflow 'ship_order'" in str(refused.value) and "(the input itself)" in str(refused.value)
    with pytest.raises(InvalidWorkflowInput, match=r"workflow 'ship_order' is invalid: field 'order_id'"):
        start_workflow("ship_order", {"order_id": "seven", "address": "1 Main St"})
    assert not Workflow.objects.exists()


def test_start_workflow__stores_the_json_given_and_a_model_instance_as_its_json():
    given = start_workflow("ship_order", {"order_id": 7, "address": "1 Main St"})
    instance = start_workflow("ship_order", Shipment(order_id=8, address="2 Main St"))
    rows = {row.pk: row.input_data for row in Workflow.objects.all()}
    assert rows[given.pk] == {"order_id": 7, "address": "1 Main St"}
    assert rows[instance.pk] == {"order_id": 8, "address": "2 Main St", "express": False}


def test_the_workflow_function__is_given_the_model_instance():
    run = start_workflow("ship_order", {"order_id": 7, "address": "1 Main St", "express": True})
    assert drain() == ["completed"]
    run.refresh_from_db()
    assert run.output_data == {"given": "Shipment", "order_id": 7, "express": True}


def test_a_callable_schema__its_refusal_names_the_field_and_its_result_is_what_the_function_is_given():
    with pytest.raises(InvalidWorkflowInput, match=r"workflow 'refund' is invalid: field 'amount_cents' must be"):
        start_workflow("refund", {"amount_cents": -5})
    with pytest.raises(InvalidWorkflowInput, match=r"workflow 'refund' is invalid: field 'amount_cents' is missing"):
        start_workflow("refund", {})
    run = start_workflow("refund", {"amount_cents": 1250})
    assert drain() == ["completed"]
    run.refresh_from_db()
    assert (run.input_data, run.output_data) == ({"amount_cents": 1250}, {"refunded": 1250})


def test_start_workflows__one_refused_item_fails_the_call_naming_it_and_writes_nothing():
    good = {"order_id": 1, "address": "1 Main St"}
    with pytest.raises(InvalidWorkflowInput, match=r"Input 2 of workflow 'ship_order' is invalid: field 'address'"):
        start_workflows("ship_order", [good, good, {"order_id": 3}])
    assert not Workflow.objects.exists()


def test_a_child_started_with_refused_input__fails_its_parent_at_once_and_is_not_written():
    parent = start_workflow("start_a_shipment", {"order_id": "seven"})
    assert drain() == ["failed"]
    parent.refresh_from_db()
    assert parent.attempts == 1 and "workflow 'ship_order' is invalid: field 'order_id'" in parent.error_message
    assert list(Workflow.objects.values_list("workflow_type", flat=True)) == ["start_a_shipment"]


def test_a_row_inserted_by_sql_with_refused_input__fails_at_once_naming_the_field():
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('ship_order', '{\"order_id\": 7}')")
    assert drain() == ["failed"]
    row = Workflow.objects.get()
    assert (row.status, row.attempts) == (WorkflowStatus.FAILED, 1)
    assert "workflow 'ship_order' is invalid: field 'address'" in row.error_message


def test_a_schedule_whose_input_the_schema_refuses__is_refused_when_declared():
    with pytest.raises(ImproperlyConfigured, match=r"'never_started'.*its input= refuses.*field 'order_id'"):
        workflow("never_started", schedule="0 * * * *", input=Shipment)(lambda ctx, data: None)


def test_input_that_is_neither_a_model_nor_a_function__is_refused_when_declared():
    with pytest.raises(ImproperlyConfigured, match="input must be a pydantic model or a function"):
        workflow("never_declared", input={"order_id": int})(lambda ctx, data: None)


def test_a_django_validation_error_of_a_form__names_each_field():
    def check(data):
        raise ValidationError({"email": ["Enter a valid email address."]})

    workflow("checked_by_a_form", input=check)(lambda ctx, data: None)
    with pytest.raises(InvalidWorkflowInput, match=r"field 'email': Enter a valid email address."):
        start_workflow("checked_by_a_form", {"email": "nope"})

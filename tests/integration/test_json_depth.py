"""JSON nested past ``MAX_JSON_DEPTH`` is refused at the door (inputs, step
outputs, events); a row written deeper by SQL still displays."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.management import call_command
from django.urls import reverse

from orchestration import send_event, start_workflow
from orchestration.errors import InvalidWorkflowInput
from orchestration.models import Workflow, WorkflowStatus
from orchestration.validation import MAX_JSON_DEPTH
from tests.factories import WorkflowFactory
from tests.support import drain
from tests.testapp.workflows import nested

pytestmark = pytest.mark.django_db

# Python 3.11's JSON decoder and encoder count each level against the recursion
# limit: a row this deep cannot even be written through Django's JSONField there.
deeper_than_python_311_reads = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="Python 3.11's json module cannot encode JSON nested 990 deep"
)


def test_start_workflow__accepts_input_nested_to_the_limit():
    assert start_workflow("echo", {"deep": nested(MAX_JSON_DEPTH - 1)}).input_data["deep"] == nested(MAX_JSON_DEPTH - 1)


def test_start_workflow__refuses_input_nested_past_the_limit_naming_it():
    with pytest.raises(InvalidWorkflowInput, match=f"nests arrays and objects 900 deep; the limit is {MAX_JSON_DEPTH}"):
        start_workflow("echo", nested(900))
    assert not Workflow.objects.exists()


def test_start_workflow__counts_no_brackets_inside_strings():
    assert start_workflow("echo", {"text": "[{" * 500}).input_data == {"text": "[{" * 500}


def test_step_output__nested_past_the_limit_fails_the_run_naming_the_limit():
    workflow = start_workflow("deep_output", {"depth": MAX_JSON_DEPTH + 1})
    drain()
    workflow.refresh_from_db()
    assert workflow.status == WorkflowStatus.FAILED
    assert f"the limit is {MAX_JSON_DEPTH}" in workflow.error_message


def test_send_event__refuses_a_payload_nested_past_the_limit():
    workflow = WorkflowFactory()
    with pytest.raises(InvalidWorkflowInput, match="nests arrays and objects"):
        send_event(workflow, "approved", nested(MAX_JSON_DEPTH + 1))


@deeper_than_python_311_reads
def test_admin_run_page__shows_a_row_nested_too_deeply_to_indent(admin_client):
    workflow = WorkflowFactory(input_data=nested(990))  # written past the door, as SQL can
    response = admin_client.get(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    assert response.status_code == 200


@deeper_than_python_311_reads
def test_workflows_show_json__prints_a_row_nested_too_deeply_to_indent():
    workflow = WorkflowFactory(input_data=nested(1200))
    out = io.StringIO()
    call_command("workflows", "show", str(workflow.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["input_data"] == nested(1200)

"""Sizes are bounded, and bad input at the edges is refused with a clear error
before anything is written."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from orchestration import InvalidWorkflowInput, start_workflow, start_workflows, workflow
from orchestration.models import Workflow, WorkflowEvent, WorkflowStatus, WorkflowStep
from orchestration.validation import ERROR_MESSAGE_MAX_LENGTH, TRACEBACK_MAX_LENGTH
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = pytest.mark.django_db


class Enormous(Exception):
    pass


@workflow("fi_enormous_error", max_retries=0)
def enormous_error(ctx: Any, data: Any) -> Any:
    def fail() -> None:
        raise Enormous("x" * 1_000_000)

    return ctx.step("fails loudly", fail)


# -- sizes ----------------------------------------------------------------------------


def test_stored_error_texts__are_capped_keeping_the_message_start_and_the_traceback_end():
    run = start_workflow("fi_enormous_error")
    assert drain() == ["failed"]
    run.refresh_from_db()
    step = WorkflowStep.objects.get(workflow=run, step_number=1)
    assert len(run.error_message) <= ERROR_MESSAGE_MAX_LENGTH and run.error_message.startswith('Step 1 "fails loudly"')
    assert len(step.error_message) <= ERROR_MESSAGE_MAX_LENGTH and "characters cut" in step.error_message
    assert len(run.error_traceback) <= TRACEBACK_MAX_LENGTH and "Enormous: xxx" in run.error_traceback
    assert "characters cut" in run.error_traceback


def test_admin_list__never_reads_the_tracebacks_of_its_rows(admin_client):
    WorkflowFactory.create_batch(3, status=WorkflowStatus.FAILED, error_traceback="Traceback ..." * 1000)
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(reverse("admin:orchestration_workflow_changelist")).status_code == 200
    listing = [query["sql"] for query in queries.captured_queries if 'FROM "workflows"' in query["sql"]]
    assert listing and not any("error_traceback" in sql for sql in listing)


# -- bad input at the edges ---------------------------------------------------------


@pytest.mark.parametrize("days", ["inf", "-1", "nan", "1e300"])
def test_purge_workflows__an_age_that_is_no_number_of_days__is_a_clear_error_and_deletes_nothing(days):
    WorkflowFactory(status=WorkflowStatus.COMPLETED)
    with pytest.raises(CommandError, match=r"number of days|before the year 1"):
        call_command("purge_workflows", "--older-than", days)
    assert Workflow.objects.count() == 1


@pytest.mark.parametrize(
    "options",
    [{"queue": "bad\x00queue"}, {"idempotency_key": "bad\x00key"}],
)
def test_start_workflow__a_nul_in_a_name_is_refused_naming_it_and_writes_nothing(options):
    with pytest.raises(InvalidWorkflowInput, match="NUL character"):
        start_workflow("fi_enormous_error", **options)
    with pytest.raises(InvalidWorkflowInput, match="NUL character"):
        start_workflows(
            "fi_enormous_error",
            [1],
            **({"queue": options["queue"]} if "queue" in options else {}),
            idempotency_keys=[options.get("idempotency_key")],
        )
    assert not Workflow.objects.exists()


def test_start_workflow__a_nul_in_the_workflow_type_is_refused_naming_it():
    with pytest.raises(InvalidWorkflowInput, match="NUL character"):
        start_workflow("bad\x00type")
    assert not Workflow.objects.exists()


def test_send_event_form__an_event_name_over_the_api_limit_is_refused_on_the_name(admin_client):
    waiting = WorkflowFactory(status=WorkflowStatus.PENDING, waiting_for="event: approval")
    url = reverse("admin:orchestration_workflow_send_event", args=[waiting.pk])
    html = admin_client.post(url, {"name": "x" * 151, "payload": "{}"}).content.decode()
    name_field = html.split('name="name"', 1)[0].rsplit("<div", 3)[-3:]
    assert "Ensure this value has at most 150 characters (it has 151)." in "".join(name_field)
    assert not WorkflowEvent.objects.exists()

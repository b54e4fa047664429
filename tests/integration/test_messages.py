"""Errors and answers that say what is wrong in the caller's own terms: the
value given, the id asked for, the names involved."""

from __future__ import annotations

import uuid

import pytest

from orchestration import (
    InvalidTransition,
    InvalidWorkflowInput,
    fork_workflow,
    restart_workflow,
    retry_workflow,
    send_event,
    start_workflow,
    start_workflows,
    wait_for_result,
)
from orchestration.models import Workflow
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = pytest.mark.django_db


def test_wait_for_result__a_negative_timeout_is_said_as_given():
    run = start_workflow("echo", 1)
    with pytest.raises(InvalidWorkflowInput, match=r"timedelta >= 0, not -1\.$"):
        wait_for_result(run, timeout=-1)


def test_fork_workflow__of_a_missing_id_names_it():
    missing = uuid.uuid4()
    with pytest.raises(Workflow.DoesNotExist, match=f"No workflow {missing} to fork"):
        fork_workflow(missing, 1)


def test_send_event__to_a_value_that_is_no_id_says_so():
    with pytest.raises(InvalidWorkflowInput, match="'not-a-uuid' is not a workflow id"):
        send_event("not-a-uuid", "approval")


def test_send_event__says_whether_the_run_was_waiting_for_that_name():
    run = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    misspelt = send_event(run.pk, "aproval", None)
    assert (misspelt.awaited, misspelt.waiting_for) == (False, "approval")
    right = send_event(run.pk, "approval", None)
    assert (right.awaited, right.waiting_for) == (True, "approval")


def test_idempotency_key__reused_by_another_type_is_refused_naming_both():
    first = start_workflow("echo", 1, idempotency_key="order-7")
    with pytest.raises(InvalidWorkflowInput) as refused:
        start_workflow("three_steps", {}, idempotency_key="order-7")
    assert f"belongs to workflow {first.pk} of type 'echo'" in str(refused.value)
    assert "cannot start a run of 'three_steps'" in str(refused.value)
    assert start_workflow("echo", 2, idempotency_key="order-7").pk == first.pk  # the same type: its run


def test_idempotency_key__a_batch_with_another_types_key_writes_nothing():
    start_workflow("echo", 1, idempotency_key="order-7")
    with pytest.raises(InvalidWorkflowInput, match="order-7"):
        start_workflows("three_steps", [{}, {}], idempotency_keys=["order-8", "order-7"])
    assert not Workflow.objects.filter(idempotency_key="order-8").exists()


def test_refusal__lists_the_states_a_move_needs_as_a_sentence():
    with pytest.raises(InvalidTransition, match="only a failed or cancelled workflow can be"):
        retry_workflow(WorkflowFactory(status="completed"))
    with pytest.raises(InvalidTransition, match=r"only a \w+, \w+ or \w+ workflow can be"):
        restart_workflow(WorkflowFactory(status="pending"))

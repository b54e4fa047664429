"""``ctx.patched`` and ``ctx.deprecate_patch``: which branch a run takes, decided
from its history, across deploys of the ``versioned`` workflow's code."""

import time

import pytest

from orchestration import InvalidWorkflowInput, start_workflow
from orchestration.models import Workflow
from orchestration.validation import validate_patch_id
from tests.support import drain
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db

SETTLE = 0.2  # the timer between the charge and the ship, long enough to suspend the run


def deploy(monkeypatch, version: int) -> None:
    monkeypatch.setenv("TESTAPP_CODE_VERSION", str(version))


def run_until_it_waits(data: dict) -> Workflow:
    workflow = start_workflow("versioned", data)
    drain()
    row = Workflow.objects.get(pk=workflow.pk)
    assert row.waiting_for is not None, row.error_message
    return row


def across_a_deploy(monkeypatch, data: dict, started_on: int, resumed_on: int) -> Workflow:
    """A run started on version ``started_on`` of the code until it waits, then
    resumed on version ``resumed_on``; returns its row."""
    deploy(monkeypatch, started_on)
    workflow = run_until_it_waits(data)
    deploy(monkeypatch, resumed_on)
    time.sleep(SETTLE + 0.05)
    drain()
    return Workflow.objects.get(pk=workflow.pk)


def bodies_run(workflow: Workflow) -> list[str]:
    return list(StepRun.objects.filter(workflow_id=workflow.pk).order_by("id").values_list("label", flat=True))


def test_patched__a_run_reaching_the_point_on_the_new_code_takes_the_new_branch_and_records_it(monkeypatch):
    deploy(monkeypatch, 2)
    workflow = start_workflow("versioned", {})
    drain()
    row = Workflow.objects.get(pk=workflow.pk)
    assert (row.status, row.output_data, row.patches) == ("completed", "charge v2", {"charge-v2": 1})


def test_patched__a_run_that_passed_the_point_on_the_old_code_resumes_through_the_old_branch(monkeypatch):
    row = across_a_deploy(monkeypatch, {"settle": SETTLE}, started_on=1, resumed_on=2)
    assert (row.status, row.output_data, row.patches) == ("completed", "charge", None)
    assert bodies_run(row) == ["charge", "ship"]


def test_patched__a_run_suspended_before_the_point_on_the_old_code_takes_the_new_branch(monkeypatch):
    row = across_a_deploy(monkeypatch, {"wait_first": SETTLE}, started_on=1, resumed_on=2)
    assert (row.status, row.output_data, row.patches) == ("completed", "charge v2", {"charge-v2": 2})


def test_patched__a_run_that_took_the_new_branch_replays_it(monkeypatch):
    row = across_a_deploy(monkeypatch, {"settle": SETTLE}, started_on=2, resumed_on=2)
    assert (row.status, row.output_data) == ("completed", "charge v2")
    assert bodies_run(row) == ["charge v2", "ship"]


def test_deprecate_patch__replays_a_run_that_took_the_new_branch(monkeypatch):
    row = across_a_deploy(monkeypatch, {"settle": SETTLE}, started_on=2, resumed_on=3)
    assert (row.status, row.output_data) == ("completed", "charge v2")


def test_deprecate_patch__fails_a_run_that_passed_the_point_on_the_old_code_naming_the_patch(monkeypatch):
    row = across_a_deploy(monkeypatch, {"settle": SETTLE}, started_on=1, resumed_on=3)
    assert row.status == "failed"
    assert "NonDeterministicWorkflow" in row.error_message and "'charge-v2'" in row.error_message
    assert bodies_run(row) == ["charge"]


def test_patched__removing_the_old_branch_too_early_fails_the_old_run_naming_the_step(monkeypatch):
    # A rollback: the code no longer has the branch the run took.
    row = across_a_deploy(monkeypatch, {"settle": SETTLE}, started_on=2, resumed_on=1)
    assert row.status == "failed"
    assert "step 1 was recorded as 'charge v2'" in row.error_message


@pytest.mark.parametrize("change_id", ["", "   ", 7, None, "x" * 101, "nul\x00"])
def test_patch_id__must_be_a_short_string(change_id):
    with pytest.raises(InvalidWorkflowInput, match=r"[Pp]atch id"):
        validate_patch_id(change_id)

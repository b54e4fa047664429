"""Retention never deletes what a live workflow still waits on, and a waiting
parent whose child row is gone anyway fails saying so, instead of being
claimed over and over."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from orchestration import send_event, start_workflow
from orchestration.models import Workflow
from tests.support import drain

pytestmark = pytest.mark.django_db


def children_of(parent: Workflow) -> list[Workflow]:
    return list(Workflow.objects.filter(parent=parent).order_by("idempotency_key"))


def half_finished_family() -> tuple[Workflow, Workflow, Workflow]:
    """A parent waiting for two children: the first completed, the second waiting for its event."""
    parent = start_workflow("fan_out", {"children": 2, "child": "awaits_approval"})
    assert drain() == ["waiting"] * 3
    first, second = children_of(parent)
    send_event(first, "approval", "first")
    assert drain() == ["completed"]  # the first child; its parent sleeps on until its wait can end
    return parent, first, second


def test_purge_workflows__keeps_a_finished_child_whose_parent_still_waits():
    parent, first, second = half_finished_family()
    output = io.StringIO()
    call_command("purge_workflows", "--older-than", "0", stdout=output)
    assert "Deleted 0 finished workflow(s)" in output.getvalue()
    assert Workflow.objects.filter(pk=first.pk, status="completed").exists()
    send_event(second, "approval", "second")
    drain()
    parent.refresh_from_db()
    assert parent.status == "completed"
    assert parent.output_data == [{"decision": "first"}, {"decision": "second"}]


def test_wait_for__a_child_deleted_by_hand_fails_the_parent_instead_of_looping():
    parent, first, second = half_finished_family()
    Workflow.objects.filter(pk=first.pk).delete()
    send_event(second, "approval", "second")
    assert drain(max_runs=10) == ["completed", "failed"]
    parent.refresh_from_db()
    assert parent.status == "failed"
    assert f"Child workflow {first.pk} (awaits_approval) no longer exists" in parent.error_message

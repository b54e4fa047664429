"""Retention: ``orchestration.retention`` and ``manage.py purge_workflows``."""

from __future__ import annotations

import datetime
import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from orchestration import retention
from orchestration.models import Workflow, WorkflowStep
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db


def aged(status: str, days: float, steps: int = 2, finished_days: float | None = None) -> Workflow:
    """A workflow created ``days`` ago that finished ``finished_days`` ago (default: then too)."""
    workflow = WorkflowFactory(status=status)
    for number in range(1, steps + 1):
        WorkflowStepFactory(workflow=workflow, step_number=number)
    created = timezone.now() - datetime.timedelta(days=days)
    done = timezone.now() - datetime.timedelta(days=days if finished_days is None else finished_days)
    Workflow.objects.filter(pk=workflow.pk).update(
        created_at=created,
        updated_at=done,
        finished_at=done if status in ("completed", "failed", "cancelled") else None,
    )
    return workflow


def remaining() -> set:
    return set(Workflow.objects.values_list("pk", flat=True))


def purge(*args: str) -> str:
    out = io.StringIO()
    call_command("purge_workflows", *args, stdout=out)
    return out.getvalue()


def days_ago(days: float) -> datetime.datetime:
    return timezone.now() - datetime.timedelta(days=days)


def test_purge_workflows__deletes_old_finished_workflows_with_their_steps():
    old = [aged("completed", 40), aged("failed", 40), aged("cancelled", 40)]
    young = aged("completed", 5)
    result = retention.purge_workflows(days_ago(30))
    assert (result.workflows, result.steps, result.expected) == (3, 6, 3)
    assert remaining() == {young.pk}
    assert not WorkflowStep.objects.filter(workflow_id__in=[w.pk for w in old]).exists()
    assert WorkflowStep.objects.filter(workflow=young).count() == 2


def test_purge_workflows__never_touches_pending_or_running_workflows_however_old():
    keep = {aged("pending", 400).pk, aged("running", 400).pk}
    retention.purge_workflows(days_ago(0))
    assert remaining() == keep


def test_purge_workflows__keeps_a_workflow_that_finished_recently_though_it_started_long_ago():
    retried_yesterday = aged("completed", 90, finished_days=1)
    assert retention.purge_workflows(days_ago(30)).workflows == 0
    assert remaining() == {retried_yesterday.pk}


def test_purge_workflows__only_the_statuses_asked_for():
    failed = aged("failed", 40)
    cancelled = aged("cancelled", 40)
    aged("completed", 40)
    retention.purge_workflows(days_ago(30), ["completed"])
    assert remaining() == {failed.pk, cancelled.pk}


def test_purge_workflows__refuses_unfinished_statuses():
    with pytest.raises(ValueError, match="not pending"):
        retention.purge_workflows(days_ago(30), ["completed", "pending"])


def test_purge_workflows__works_in_batches_and_reports_each():
    for _ in range(5):
        aged("completed", 40, steps=1)
    seen = []
    result = retention.purge_workflows(
        days_ago(30), batch_size=2, on_batch=lambda p: seen.append((p.batches, p.workflows))
    )
    assert seen == [(1, 2), (2, 4), (3, 5)]
    assert (result.workflows, result.steps, result.batches) == (5, 5, 3)


def test_purge_workflows__dry_run_counts_and_deletes_nothing():
    aged("completed", 40)
    result = retention.purge_workflows(days_ago(30), dry_run=True)
    assert (result.expected, result.workflows) == (1, 0)
    assert len(remaining()) == 1


# -- manage.py purge_workflows ----------------------------------------------------------


def test_purge_command__prints_a_progress_line_per_batch_and_a_summary():
    for _ in range(3):
        aged("failed", 40)
    text = purge("--older-than", "30", "--batch-size", "2")
    lines = text.splitlines()
    assert lines[0] == "batch 1: 2 of ~3 workflows deleted (4 steps)"
    assert lines[1] == "batch 2: 3 of ~3 workflows deleted (6 steps)"
    assert lines[2].startswith("Deleted 3 finished workflow(s) finished before ")
    assert lines[2].endswith("and their 6 step(s), in 2 batch(es).")
    assert remaining() == set()


def test_purge_command__dry_run_says_what_it_would_delete():
    aged("completed", 40)
    text = purge("--older-than", "30", "--dry-run")
    assert text.startswith("Dry run: 1 finished workflow(s) finished before ")
    assert len(remaining()) == 1


def test_purge_command__status_is_repeatable_or_comma_separated():
    keep = aged("cancelled", 40)
    aged("completed", 40)
    aged("failed", 40)
    purge("--older-than", "30", "--status", "completed,failed")
    assert remaining() == {keep.pk}
    purge("--older-than", "30", "--status", "completed", "--status", "cancelled")
    assert remaining() == set()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--older-than", "30", "--status", "running"], "Only finished workflows can be purged"),
        (["--older-than", "30", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_purge_command__refuses_what_would_be_wrong(args, error):
    aged("running", 40)
    with pytest.raises(CommandError, match=error):
        purge(*args)
    assert len(remaining()) == 1


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_purge_command__older_than_must_be_a_number_of_days(value):
    with pytest.raises(CommandError, match="--older-than"):
        purge("--older-than", value)


def test_purge_command__older_than_is_required():
    with pytest.raises(CommandError, match="--older-than"):
        purge()

"""The demo's report: a steps column that counts what each run ran, and a
summary whose parts add up to the whole."""

from __future__ import annotations

import pytest

from orchestration.models import StepStatus, WorkflowStatus
from project.demo.management.commands.run_demo import report_line, report_rows, summary
from tests.factories import WorkflowFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db


def finished(status: str, attempts: int, steps: list[str]):
    run = WorkflowFactory(status=status, attempts=attempts, current_step=steps.count(StepStatus.COMPLETED))
    for number, step_status in enumerate(steps, start=1):
        WorkflowStepFactory(workflow=run, step_number=number, status=step_status)
    return run


def test_demo_report__the_steps_column_counts_the_steps_completed_and_run():
    payout = finished(WorkflowStatus.FAILED, 3, [StepStatus.COMPLETED, StepStatus.FAILED])
    [row] = report_rows([payout.pk])
    assert " 3            1/2  " in report_line(row)


def test_demo_report__the_summary_adds_up_and_counts_retried_runs_apart():
    runs = [finished(WorkflowStatus.COMPLETED, 1, [StepStatus.COMPLETED] * 4) for _ in range(4)]
    runs.append(finished(WorkflowStatus.COMPLETED, 3, [StepStatus.COMPLETED] * 2))
    runs.append(finished(WorkflowStatus.FAILED, 3, [StepStatus.COMPLETED, StepStatus.FAILED]))
    assert summary(report_rows([run.pk for run in runs])) == (
        "6 workflows: 5 completed, 1 failed; 2 took more than one attempt (1 completed, 1 failed)"
    )

"""Pausing runs that real ``runworkers`` processes run: a pause lands at any
moment of a step (its body, its checkpoint, the run's batched completion), and
the run is given back at its step boundary with every step it finished kept."""

from __future__ import annotations

import random
import time

import pytest

from orchestration import pause_workflow, resume_workflow, start_workflow
from orchestration.errors import InvalidTransition
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import start_workers
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_pause__racing_step_checkpoints_loses_no_completed_step_and_runs_no_step_twice(workers):
    runs = [start_workflow("slow", {"seconds": 0.02, "steps": 8}) for _ in range(12)]
    workers.append(start_workers("--concurrency", "4", "--poll-interval", "0.1"))
    ids = [run.pk for run in runs]
    chance = random.Random(46)
    paused_while_running = 0
    deadline = time.monotonic() + 90
    while Workflow.objects.filter(pk__in=ids).exclude(status="completed").exists():
        assert time.monotonic() < deadline, "the runs did not complete"
        running = list(Workflow.objects.filter(pk__in=ids, status="running").values_list("pk", flat=True))
        for pk in running:
            try:
                pause_workflow(pk)
                paused_while_running += 1
            except InvalidTransition:
                pass  # it moved on meanwhile
        time.sleep(chance.uniform(0, 0.05))
        for pk in Workflow.objects.filter(pk__in=ids, status="paused").values_list("pk", flat=True):
            resume_workflow(pk)
        time.sleep(chance.uniform(0, 0.05))
    assert paused_while_running >= 10
    for run in runs:
        run.refresh_from_db()
        assert run.output_data == {"done": True}
        # Each step's body ran once: a pause gave no finished step back to run again.
        bodies = StepRun.objects.filter(workflow_id=run.pk).values_list("step_number", flat=True)
        assert sorted(bodies) == list(range(1, 9)), run.pk


def test_pause__a_run_stays_paused_holding_no_thread_until_resumed(workers):
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.1"))
    long_run = start_workflow("slow", {"seconds": 0.3, "steps": 20})
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=long_run.pk).exists(), timeout=60)
    pause_workflow(long_run)
    assert wait_for(lambda: Workflow.objects.get(pk=long_run.pk).lease_token is None, timeout=10)
    done_before = StepRun.objects.filter(workflow_id=long_run.pk).count()
    # The one thread is free again: another run completes while the first stays paused.
    other = start_workflow("three_steps")
    assert wait_for(lambda: Workflow.objects.get(pk=other.pk).status == "completed", timeout=30)
    long_run.refresh_from_db()
    assert (long_run.status, long_run.current_step) == ("paused", done_before)
    assert StepRun.objects.filter(workflow_id=long_run.pk).count() == done_before
    resume_workflow(long_run)
    assert wait_for(lambda: Workflow.objects.get(pk=long_run.pk).status == "completed", timeout=60)
    assert StepRun.objects.filter(workflow_id=long_run.pk).count() == 20

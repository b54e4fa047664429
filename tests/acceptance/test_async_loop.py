"""Async runs of a real ``runworkers`` process share its event loop: many at
once apart from its threads, resumed after their last checkpoint when the
process is killed, finished or released when it is stopped."""

from __future__ import annotations

import signal

import pytest

from orchestration import start_workflow, start_workflows
from orchestration.models import Workflow, WorkflowStep
from tests.acceptance.test_runworkers import wait_for
from tests.support import run_burst, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def most_at_once(step_number: int) -> int:
    """The largest number of runs in step ``step_number`` at one moment, from the step rows' times."""
    rows = WorkflowStep.objects.filter(step_number=step_number, status="completed")
    edges = sorted([(row.started_at, 1) for row in rows] + [(row.completed_at, -1) for row in rows])
    at_once = most = 0
    for _, change in edges:  # an end sorts before a start at the same instant
        at_once += change
        most = max(most, at_once)
    return most


def naps_in_one_process(workers, count: int, first: float, second: float, in_step: int, **env: str):
    """Start ``count`` runs of ``async_two_naps`` and a ``--concurrency 1``
    process; return both once every run's step ``in_step`` body began."""
    runs = start_workflows("async_two_naps", [{"first": first, "second": second} for _ in range(count)])
    process = start_workers("--concurrency", "1", "--poll-interval", "0.2", env=worker_env(**env))
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(step_number=in_step).count() == count, timeout=30)
    return runs, process


def stopped(process, signum: int = signal.SIGTERM) -> str:
    """Send ``signum``; the process's log once it exited with status 0."""
    process.send_signal(signum)
    log, _ = process.communicate(timeout=15)
    assert process.returncode == 0, log
    return log


def test_async_runs__fifty_overlap_on_one_thread_and_resume_after_their_last_checkpoint_when_killed(workers):
    # Each run's step 1 checkpoint is written with step 2's start: wait for step 2 to begin everywhere.
    runs, first = naps_in_one_process(workers, 50, first=0.5, second=2, in_step=2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert most_at_once(1) >= 40  # one thread: without the shared loop, one at a time
    second = start_workers(
        "--concurrency", "1", "--poll-interval", "0.2", env=worker_env(ORCHESTRATION_STUCK_AFTER="2")
    )
    workers.append(second)
    ids = [run.pk for run in runs]
    done = lambda: Workflow.objects.filter(pk__in=ids, status="completed").count() == 50  # noqa: E731
    assert wait_for(done, timeout=60, interval=0.2)
    ran = sorted(StepRun.objects.values_list("step_number", "pid"))
    assert ran == [(1, first.pid)] * 50 + [(2, first.pid)] * 50 + [(2, second.pid)] * 50


def test_async_runs__on_sigterm_finish_their_running_step_then_are_released(workers):
    runs, process = naps_in_one_process(workers, 20, first=1, second=0, in_step=1)
    log = stopped(process)
    statuses = dict(Workflow.objects.filter(pk__in=[run.pk for run in runs]).values_list("id", "status"))
    released = [id for id, status in statuses.items() if status == "pending"]
    assert set(statuses.values()) <= {"pending", "completed"} and released, log  # none left running
    assert WorkflowStep.objects.filter(step_number=1, status="completed").count() == 20  # no step cut short
    assert not StepRun.objects.filter(step_number=2, workflow_id__in=released).exists()  # released at its boundary


def test_async_runs__still_in_a_step_when_the_grace_period_ends_are_released_at_once(workers):
    runs, process = naps_in_one_process(workers, 10, first=60, second=0, in_step=1, ORCHESTRATION_SHUTDOWN_GRACE="0.5")
    log = stopped(process)
    finished = Workflow.objects.filter(pk__in=[run.pk for run in runs])
    assert {(run.status, run.attempts) for run in finished} == {("pending", 0)}, log


def test_async_runs__beyond_the_loops_room_run_on_the_threads_and_one_raising_system_exit_fails_alone():
    exits = start_workflow("async_exits")  # claimed first: into the empty loop
    runs = start_workflows("async_two_naps", [{"first": 0.5, "second": 0} for _ in range(8)])
    result = run_burst("--concurrency", "1", "--async-concurrency", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert Workflow.objects.filter(pk__in=[run.pk for run in runs], status="completed").count() == 8
    assert 2 <= most_at_once(1) <= 3  # two in the loop, one on the thread
    exits.refresh_from_db()
    assert exits.status == "failed" and "SystemExit: a step that calls sys.exit" in exits.error_message


def test_async_step__raising_a_cancelled_error_of_its_own_fails_the_attempt_which_is_retried(workers):
    run = start_workflow("async_awaits_a_cancelled_task")
    workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.2"))
    assert wait_for(lambda: Workflow.objects.get(pk=run.pk).status == "completed", timeout=20)
    run.refresh_from_db()
    assert (run.attempts, run.output_data) == (2, {"attempt": 2})
    assert "CancelledError" in run.error_history[0]["message"]

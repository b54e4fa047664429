"""A completed step is never run again because of a dropped connection: its
deferred checkpoint, written with the run's next write, is written again by
the retried write when that transaction is lost to a connection error.

The fault is PostgreSQL's: a trigger fails the next write once with SQLSTATE
08006 (connection failure), which the worker sees as the database going away."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from orchestration import start_workflow, workflow
from orchestration.models import FINISHED_STATUSES, StepStatus, Workflow, WorkflowStatus, WorkflowStep
from orchestration.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

bodies_run: list[str] = []


@workflow("fi_step_then_sleep", max_retries=0)
def step_then_sleep(ctx: Any, data: Any) -> Any:
    counted = ctx.step("count", lambda: bodies_run.append("count") or len(bodies_run))
    ctx.sleep("nap", 2.0)  # its record is the write that carries the step's checkpoint; then a replay
    return counted


@pytest.fixture
def connection_lost_once_at_the_wait() -> Iterator[None]:
    """The first write of a waiting step row fails as if the connection dropped."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE SEQUENCE fi_writes;  -- not rolled back with the failed transaction
            CREATE FUNCTION fi_drop_once() RETURNS trigger AS $$
            BEGIN
                IF NEW.status = 'pending' AND nextval('fi_writes') = 1 THEN
                    RAISE EXCEPTION 'injected: connection lost' USING ERRCODE = '08006';
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER fi_drop_once BEFORE INSERT OR UPDATE ON workflow_steps
                FOR EACH ROW EXECUTE FUNCTION fi_drop_once();
            """
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER fi_drop_once ON workflow_steps; DROP FUNCTION fi_drop_once(); DROP SEQUENCE fi_writes"
        )


def run_until_finished(run: Workflow, timeout: float = 30) -> Workflow:
    worker = Worker(concurrency=1, listen=False, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while Workflow.objects.get(pk=run.pk).status not in FINISHED_STATUSES:
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=30)
    return Workflow.objects.get(pk=run.pk)


def test_deferred_checkpoint__lost_with_its_transaction_to_a_connection_error__is_written_by_the_retry(
    connection_lost_once_at_the_wait,
):
    bodies_run.clear()
    run = run_until_finished(start_workflow("fi_step_then_sleep"))
    assert (run.status, run.output_data) == (WorkflowStatus.COMPLETED, 1)
    assert bodies_run == ["count"]  # the completed step did not run again after the wait
    step = WorkflowStep.objects.get(workflow=run, step_number=1)
    assert (step.status, step.output_data, step.attempts) == (StepStatus.COMPLETED, 1, 1)

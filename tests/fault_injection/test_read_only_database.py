"""A database that refuses writes for a few seconds (a failover's switch, an
operator's maintenance) is an outage for the workers, as a lost connection is:
the runs they hold wait it out and finish, and they claim again at once when
the database takes writes again.

The fault is PostgreSQL's: ``default_transaction_read_only`` on for the test
database, with every other session to it terminated (``read_only_failover``)."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import read_only_failover, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

#: The stuck sweep cannot be what ends the runs here.
NO_SWEEP = dict(ORCHESTRATION_STUCK_AFTER="300", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")


def database_clock() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        return float(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("workflow_type", "data", "first_step"),
    [("slow", {"seconds": 1.0, "steps": 3}, "slow 1"), ("async_three_steps", {"sleep": 1.0}, "a")],
    ids=["on threads", "in the shared event loop"],
)
def test_read_only_database__runs_in_flight_wait_it_out_and_finish_without_the_stuck_sweep(
    workers, workflow_type, data, first_step
):
    runs = [start_workflow(workflow_type, data) for _ in range(3)]
    process = start_workers("--concurrency", "4", env=worker_env(**NO_SWEEP))
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(label=first_step).count() == 3), process.log_path.read_text()
    with read_only_failover():
        time.sleep(3)  # each step (1 s) ends meanwhile, and its checkpoint meets a read-only database
    finished = lambda: set(Workflow.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True))  # noqa: E731
    assert wait_for(lambda: finished() == {"completed"}, timeout=30), process.log_path.read_text()
    log = process.log_path.read_text()
    assert "unexpected error in the worker" not in log, log


def test_read_only_database__workers_claim_within_2s_once_it_takes_writes_again(workers):
    process = start_workers("--concurrency", "2", env=worker_env(**NO_SWEEP))
    workers.append(process)
    assert wait_for(lambda: "starting" in process.log_path.read_text())
    with read_only_failover():
        time.sleep(1)
        waiting = start_workflow("echo", "started while the database refused the workers' writes")
        time.sleep(4)  # long enough for every thread's backoff to reach its longest (a second)
        assert Workflow.objects.get(pk=waiting.pk).status == "pending"
    writable_again = database_clock()
    assert wait_for(lambda: Workflow.objects.get(pk=waiting.pk).started_at is not None, timeout=30)
    started = Workflow.objects.get(pk=waiting.pk).started_at.timestamp()
    assert started - writable_again < 2.0, process.log_path.read_text()

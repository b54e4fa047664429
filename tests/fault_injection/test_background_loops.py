"""A ``runworkers`` process's background threads survive any database error (a
failover to a read-only server raises ``InternalError``), and a process whose
thread dies anyway exits non-zero instead of running on without it."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from django.db import connection

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import read_only_failover, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

FAST_LIVENESS = dict(ORCHESTRATION_STUCK_AFTER="2", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")


def heartbeat_of(workflow):
    return Workflow.objects.filter(pk=workflow.pk).values_list("updated_at", flat=True).get()


def test_heartbeat__carries_on_after_a_read_only_failover(workers):
    workflow = start_workflow("slow", {"seconds": 12, "steps": 1})
    env = worker_env(ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")
    process = start_workers("--concurrency", "1", env=env)
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=workflow.pk).exists())
    with read_only_failover():
        time.sleep(1.5)  # the heartbeat reconnects, and its UPDATE raises InternalError
    after_failover = heartbeat_of(workflow)
    assert wait_for(lambda: heartbeat_of(workflow) > after_failover, timeout=5), process.log_path.read_text()


def test_stuck_sweep__carries_on_after_a_read_only_failover(workers):
    stuck = start_workflow("echo", "stuck")
    Workflow.objects.filter(pk=stuck.pk).update(
        status="running", lease_token=uuid.uuid4(), attempts=1, worker_id="a dead worker"
    )
    with connection.cursor() as cursor:  # no heartbeat for an hour
        cursor.execute("UPDATE workflows SET updated_at = now() - interval '1 hour' WHERE id = %s", [stuck.pk])
    with read_only_failover():
        process = start_workers("--concurrency", "1", env=worker_env(**FAST_LIVENESS))
        workers.append(process)
        assert wait_for(lambda: "starting" in process.log_path.read_text())
        time.sleep(2)  # a sweep every 0.5s, each raising InternalError (SELECT FOR UPDATE)
        assert Workflow.objects.get(pk=stuck.pk).status == "running"
    assert wait_for(lambda: Workflow.objects.get(pk=stuck.pk).status == "completed", timeout=30), (
        process.log_path.read_text()
    )


def test_runworkers__exits_non_zero_when_its_background_thread_dies(workers):
    thread = "services"  # the listener, the heartbeat, the sweep and the schedules
    workflow = start_workflow("slow", {"seconds": 2, "steps": 1})  # held: the heartbeat has work
    env = worker_env(
        TESTAPP_KILL_THREAD=f"orchestration-{thread}",
        ORCHESTRATION_HEARTBEAT_INTERVAL="0.3",
        ORCHESTRATION_SCHEDULER="1",
    )
    process = start_workers("--concurrency", "1", env=env)
    workers.append(process)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process runs on without its {thread} thread")
    assert process.returncode == 1, output
    assert f"the {thread} thread died" in output
    # stopped as on SIGTERM: the running step finished, or the run was released
    assert Workflow.objects.get(pk=workflow.pk).status in ("completed", "pending")

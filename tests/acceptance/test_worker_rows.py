"""Workers as rows: a real ``runworkers`` process registers itself, refreshes its
row with its heartbeat, deletes it when stopped, and is marked gone by another
process's sweep when killed."""

from __future__ import annotations

import signal

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.urls import reverse

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowWorker
from tests.acceptance.test_runworkers import wait_for
from tests.support import start_workers, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

FAST_LIVENESS = dict(ORCHESTRATION_STUCK_AFTER="2", ORCHESTRATION_HEARTBEAT_INTERVAL="0.3")


def row_of(process) -> WorkflowWorker | None:
    return WorkflowWorker.objects.filter(pid=process.pid).first()


def test_worker_row__appears_when_runworkers_starts_and_its_heartbeat_refreshes_it(workers):
    process = start_workers("--concurrency", "3", "--queues", "default,other", env=worker_env(**FAST_LIVENESS))
    workers.append(process)
    assert wait_for(lambda: row_of(process) is not None)
    row = row_of(process)
    assert row.id.split(":")[1] == str(process.pid)
    assert (row.queues, row.concurrency, row.gone_at) == (["default", "other"], 3, None)
    assert row.host and row.version and row.started_at <= row.last_seen_at
    first_seen = row.last_seen_at
    assert wait_for(lambda: WorkflowWorker.objects.get(pk=row.pk).last_seen_at > first_seen, timeout=10)


def test_worker_row__disappears_on_sigterm(workers):
    process = start_workers("--concurrency", "1")
    workers.append(process)
    assert wait_for(lambda: row_of(process) is not None)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert row_of(process) is None


def others_connected() -> int:
    """Sessions on the test database besides this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_worker_row__is_deleted_on_sigterm_after_the_workers_connections_were_lost(workers):
    process = start_workers("--concurrency", "1")
    workers.append(process)
    # Its row is written on the main thread's connection, closed before its threads open theirs.
    assert wait_for(lambda: row_of(process) is not None and others_connected() >= 1)
    with connection.cursor() as cursor:  # as a database restart or a failover would
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "worker rows: remove failed" not in output
    assert row_of(process) is None


def test_worker_row__of_a_killed_worker_is_marked_gone_by_another_workers_sweep_and_its_run_reclaimed(workers):
    env = worker_env(**FAST_LIVENESS)
    workflow = start_workflow("slow", {"seconds": 30, "steps": 1})
    victim = start_workers("--concurrency", "1", env=env)
    workers.append(victim)
    assert wait_for(lambda: Workflow.objects.filter(pk=workflow.pk, status="running").exists())
    victim_row = row_of(victim)
    assert Workflow.objects.get(pk=workflow.pk).worker_id == victim_row.pk
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    assert WorkflowWorker.objects.get(pk=victim_row.pk).gone_at is None  # nobody has swept yet
    survivor = start_workers("--concurrency", "1", "--queues", "other", env=env)  # sweeps; claims nothing here
    workers.append(survivor)
    assert wait_for(lambda: WorkflowWorker.objects.get(pk=victim_row.pk).gone_at is not None, timeout=30)
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"  # reclaimed by the same sweep
    assert row_of(survivor).gone_at is None


def test_workers_page__lists_a_live_worker_with_what_it_holds_and_the_workflow_page_links_to_it(workers, client):
    from django.contrib.auth.models import User

    User.objects.create_superuser("root", password="pw")
    client.login(username="root", password="pw")
    workflow = start_workflow("slow", {"seconds": 30, "steps": 1})
    process = start_workers("--concurrency", "1")
    workers.append(process)
    assert wait_for(lambda: Workflow.objects.filter(pk=workflow.pk, status="running").exists())
    worker_id = row_of(process).pk
    page = client.get(reverse("admin:orchestration_workflowworker_changelist")).content.decode()
    assert worker_id in page and "1 running" in page and "live" in page
    held = client.get(reverse("admin:orchestration_workflow_changelist"), {"worker": worker_id})
    assert [w.pk for w in held.context["cl"].result_list] == [workflow.pk]
    worker_url = reverse("admin:orchestration_workflowworker_change", args=[quote(worker_id)])
    assert str(workflow.pk) in client.get(worker_url).content.decode()
    workflow_page = client.get(reverse("admin:orchestration_workflow_change", args=[workflow.pk])).content.decode()
    assert worker_url in workflow_page
    process.send_signal(signal.SIGTERM)
    assert wait_for(lambda: "SIGTERM received" in process.log_path.read_text())
    process.send_signal(signal.SIGTERM)  # the second: release the run now
    process.communicate(timeout=30)
    workflow_page = client.get(reverse("admin:orchestration_workflow_change", args=[workflow.pk])).content.decode()
    assert "(stopped)" in workflow_page  # released to pending; its worker's row is gone with it

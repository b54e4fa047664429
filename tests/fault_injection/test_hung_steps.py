"""A step that hangs never takes the database down: the worker closes the
connections of a body it abandons (timeout, deadline, cancel, lost lease),
and a process whose abandoned bodies keep running restarts itself at
``MAX_ABANDONED_BODIES``. Real ``runworkers`` processes, told apart in
``pg_stat_activity`` by their ``application_name`` (libpq's ``PGAPPNAME``)."""

from __future__ import annotations

import io
import json
import re
import signal
import time
import urllib.request
import uuid

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import strip_tags

from orchestration import cancel_workflow, start_workflow
from orchestration.models import Workflow, WorkflowWorker
from tests.acceptance.test_runworkers import wait_for
from tests.acceptance.test_worker_metrics import free_port, samples_of
from tests.support import other_connection, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)

#: The connections of a ``runworkers`` besides its threads': its main thread's
#: (the start's writes), the heartbeat's, the stuck sweep's and the listener's.
SERVICE_CONNECTIONS = 4
#: Those of the shared event loop of async runs: its database threads', and
#: the thread where Django's async ORM runs its queries.
ASYNC_CONNECTIONS = 4 + 1


def worker_named(application_name: str, *args: str, **env: str):
    """A ``runworkers`` process whose connections carry ``application_name``
    (no shared event loop: each of its connections is one counted here)."""
    return start_workers("--async-concurrency", "0", *args, env=worker_env(PGAPPNAME=application_name, **env))


def connections_of(application_name: str) -> int:
    with other_connection() as other:
        row = other.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application_name])
        return row.fetchone()[0]


def sleeper_sessions(workflow) -> list[int]:
    """The server sessions running ``workflow``'s ``pg_sleep`` (see ``sleeps_in_the_database``)."""
    with other_connection() as other:
        rows = other.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE %s",
            [f"%sleeper {workflow.pk} */%"],
        ).fetchall()
        return [pid for (pid,) in rows]


def sleeper_running(workflow) -> bool:
    """Whether ``workflow``'s ``pg_sleep`` still runs."""
    with other_connection() as other:
        row = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE %s"
            " AND state = 'active'",
            [f"%sleeper {workflow.pk} */%"],
        ).fetchone()
        return row[0] > 0


def session_exists(pid: int) -> bool:
    with other_connection() as other:
        return other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0] == 1


def most_connections_until_all_failed(application_name: str, runs) -> int:
    """The most connections ``application_name`` held at once until every one of ``runs`` failed."""
    most = 0

    def all_failed() -> bool:
        nonlocal most
        most = max(most, connections_of(application_name))
        return Workflow.objects.filter(pk__in=[run.pk for run in runs], status="failed").count() == len(runs)

    assert wait_for(all_failed, timeout=40, interval=0.02)
    return most


def ended(workflow, status: str):
    return lambda: Workflow.objects.get(pk=workflow.pk).status == status


def test_hung_steps__hold_no_more_connections_than_the_worker_has_threads(workers):
    name = f"hung-{uuid.uuid4().hex[:8]}"
    runs = [start_workflow("reads_then_hangs", {"hang": 10, "timeout": 0.5}) for _ in range(12)]
    # No restart here: the abandoned bodies pile up in the one process.
    workers.append(worker_named(name, "--concurrency", "4", ORCHESTRATION_MAX_ABANDONED_BODIES="100"))
    steady, threads = 4 + SERVICE_CONNECTIONS, 4
    assert 0 < most_connections_until_all_failed(name, runs) <= steady + threads
    for run in Workflow.objects.filter(pk__in=[run.pk for run in runs]):
        assert run.attempts == 3
        assert run.error_message.startswith('Step 1 "read then hang" failed: StepTimeout: ')


def test_hung_steps__under_the_default_cap_restart_the_worker_within_the_same_connections(workers):
    name = f"hung-{uuid.uuid4().hex[:8]}"
    runs = [start_workflow("reads_then_hangs", {"hang": 10, "timeout": 0.5}) for _ in range(3)]
    process = worker_named(name, "--concurrency", "4")
    workers.append(process)
    steady, threads = 4 + SERVICE_CONNECTIONS, 4
    assert 0 < most_connections_until_all_failed(name, runs) <= steady + threads
    for run in Workflow.objects.filter(pk__in=[run.pk for run in runs]):
        assert run.attempts == 3
        assert run.error_message.startswith('Step 1 "read then hang" failed: StepTimeout: ')
    assert process.poll() is None and "restarting:" in process.log_path.read_text()


def test_abandoned_body__finds_its_database_connection_closed(workers, tmp_path):
    report = tmp_path / "what the body saw"
    run = start_workflow("reads_then_hangs", {"hang": 1.5, "timeout": 0.5, "report": str(report)}, max_retries=0)
    worker = worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "1", ORCHESTRATION_MAX_ABANDONED_BODIES="9")
    workers.append(worker)
    assert wait_for(ended(run, "failed"), timeout=20)
    assert wait_for(report.exists, timeout=10)
    time.sleep(0.1)  # written whole
    assert report.read_text().startswith("django.db.utils.OperationalError: ")


def query_hung_in_a_worker(*, step_timeout: float = 60, **options):
    """A run whose step body waits in ``pg_sleep(60)``, and that query's server session."""
    run = start_workflow("sleeps_in_the_database", {"seconds": 60, "timeout": step_timeout}, **options)
    assert wait_for(lambda: sleeper_sessions(run), timeout=30)
    return run, sleeper_sessions(run)[0]


def test_step_timeout__ends_the_query_its_abandoned_body_waits_on(workers):
    workers.append(worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "1"))
    run, session = query_hung_in_a_worker(step_timeout=1)
    assert wait_for(ended(run, "failed"), timeout=10)
    assert wait_for(lambda: not session_exists(session), timeout=5)


def test_cancel__ends_the_query_of_the_step_it_abandons(workers):
    workers.append(worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "1"))
    run, session = query_hung_in_a_worker()
    cancel_workflow(run)
    assert wait_for(lambda: not session_exists(session), timeout=5)


def test_lost_lease__ends_the_query_of_the_step_it_abandons(workers):
    workers.append(worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "1"))
    run, session = query_hung_in_a_worker()
    # As another worker's reclaim would: the run's lease is no longer this worker's.
    Workflow.objects.filter(pk=run.pk).update(lease_token=uuid.uuid4())
    assert wait_for(lambda: not session_exists(session), timeout=5)


def test_deadline__ends_the_query_of_the_step_it_abandons(workers):
    workers.append(worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "1"))
    ready = start_workflow("echo", "ready")  # the deadline counts from the start: the worker runs first
    assert wait_for(ended(ready, "completed"), timeout=60)
    run, session = query_hung_in_a_worker(timeout=3)
    assert wait_for(ended(run, "cancelled"), timeout=10)
    assert wait_for(lambda: not session_exists(session), timeout=5)


def test_abandoned_bodies__at_the_cap_the_worker_restarts_and_serves_on(workers):
    port = free_port()
    process = worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "2", "--metrics-port", str(port))
    workers.append(process)
    hung = [start_workflow("hangs_ignoring_errors", {"hang": 120, "timeout": 0.5}) for _ in range(2)]
    for run in hung:
        assert wait_for(ended(run, "completed"), timeout=40)
    after = [start_workflow("echo", n) for n in range(3)]
    for run in after:
        assert wait_for(ended(run, "completed"), timeout=20)

    assert process.poll() is None  # the same process, its command executed again
    log = process.log_path.read_text()
    assert "abandoned step bodies still run (MAX_ABANDONED_BODIES 2)" in log
    assert any(f"workflow {run.pk} (hangs_ignoring_errors) step 1" in log for run in hung)
    for run in hung:
        labels = StepRun.objects.filter(workflow_id=run.pk).order_by("id").values_list("label", flat=True)
        assert list(labels) == ["attempt 1", "attempt 2"]
    assert all(Workflow.objects.get(pk=run.pk).attempts == 1 for run in after)
    (row,) = WorkflowWorker.objects.filter(gone_at__isnull=True)
    assert row.pid == process.pid and row.id not in log.split(" starting:")[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
        metrics = samples_of(response.read().decode())
    assert metrics[("orchestration_worker_restarts_total", ())] == 1
    assert metrics[("orchestration_abandoned_step_bodies", ())] == 0


def listed_by_the_cli(process) -> dict | None:
    """``process``'s live row as ``manage.py workflows workers --json`` lists it."""
    out = io.StringIO()
    call_command("workflows", "workers", "--json", stdout=out)
    return next((row for row in json.loads(out.getvalue()) if row["pid"] == process.pid), None)


def cli_line_of(process) -> list[str]:
    """The cells of ``process``'s line of ``manage.py workflows workers`` (its table's heading first)."""
    out = io.StringIO()
    call_command("workflows", "workers", stdout=out)
    heading, *lines = out.getvalue().splitlines()
    (line,) = [line for line in lines if f":{process.pid}:" in line]
    return [*zip(heading.split(), line.split(), strict=False)]


def shown_on_the_workers_page(admin_client, process) -> str:
    """The "hung / restarts" cell of ``process``'s live row on the admin's workers page."""
    page = admin_client.get(reverse("admin:orchestration_workflowworker_changelist"), {"state": "live"})
    (row,) = [row for row in re.findall(r"<tr.*?</tr>", page.content.decode(), re.S) if f":{process.pid}:" in row]
    cell = re.search(r'<td class="field-hung_and_restarts">(.*?)</td>', row, re.S)
    return " ".join(strip_tags(cell.group(1)).split())


def test_hung_bodies_and_restarts__are_shown_on_the_workers_page_and_by_the_cli(workers, admin_client):
    # Under the default cap (its --concurrency, 2): one hung body is carried, a second restarts the process.
    process = worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "2")
    workers.append(process)
    first = start_workflow("hangs_ignoring_errors", {"hang": 120, "timeout": 0.5})
    assert wait_for(ended(first, "completed"), timeout=40)  # its second attempt; the first one's body hangs on
    assert wait_for(lambda: (listed_by_the_cli(process) or {}).get("abandoned_bodies") == 1, timeout=10)
    assert listed_by_the_cli(process)["restarts"] == 0
    assert ("hung/restarts", "1/0") in cli_line_of(process)
    assert shown_on_the_workers_page(admin_client, process) == "1 / 0"

    second = start_workflow("hangs_ignoring_errors", {"hang": 120, "timeout": 0.5})
    assert wait_for(ended(second, "completed"), timeout=40)
    # The process restarted in place (same pid) and registered a new row, which counts the restart.
    assert wait_for(lambda: (listed_by_the_cli(process) or {}).get("restarts") == 1, timeout=30)
    assert listed_by_the_cli(process)["abandoned_bodies"] == 0
    assert ("hung/restarts", "0/1") in cli_line_of(process)
    assert shown_on_the_workers_page(admin_client, process) == "0 / 1"
    assert process.poll() is None and "restarting:" in process.log_path.read_text()


def test_async_step_past_its_timeout__is_cancelled_holding_no_connection(workers):
    name = f"hung-{uuid.uuid4().hex[:8]}"
    runs = [start_workflow("async_reads_then_hangs", {"hang": 60, "timeout": 0.5}) for _ in range(8)]
    workers.append(start_workers("--concurrency", "2", "--async-concurrency", "4", env=worker_env(PGAPPNAME=name)))
    assert 0 < most_connections_until_all_failed(name, runs) <= 2 + SERVICE_CONNECTIONS + ASYNC_CONNECTIONS
    for run in Workflow.objects.filter(pk__in=[run.pk for run in runs]):
        assert "StepTimeout" in run.error_message and "it was cancelled" in run.error_message


@pytest.mark.parametrize("where", ["in the shared loop", "on a worker thread"])
def test_async_step_past_its_timeout__ends_the_query_it_waits_on(workers, where):
    loop = "100" if where == "in the shared loop" else "0"
    workers.append(start_workers("--concurrency", "1", "--async-concurrency", loop))
    run = start_workflow("async_sleeps_in_the_database", {"seconds": 60, "timeout": 1})
    assert wait_for(lambda: sleeper_running(run), timeout=30)
    assert wait_for(ended(run, "failed"), timeout=15)
    # Its connection is shared (the async ORM's, or the worker thread's): its query ends, the session stays.
    assert wait_for(lambda: not sleeper_running(run), timeout=5)


def test_signal__while_stopping_to_restart_makes_the_worker_exit_instead(workers):
    process = worker_named(f"hung-{uuid.uuid4().hex[:8]}", "--concurrency", "2", ORCHESTRATION_MAX_ABANDONED_BODIES="1")
    workers.append(process)
    slow = start_workflow("slow", {"seconds": 3, "steps": 1})  # still running while the process stops
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=slow.pk).exists(), timeout=30)
    start_workflow("hangs_ignoring_errors", {"hang": 60, "timeout": 0.5})
    assert wait_for(lambda: "stopping claiming" in process.log_path.read_text(), timeout=20)
    process.send_signal(signal.SIGTERM)
    log, _ = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "SIGTERM received while stopping to restart; it will exit instead" in log
    assert "restarting:" not in log
    assert Workflow.objects.get(pk=slow.pk).status == "completed"

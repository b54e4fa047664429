"""What idle ``runworkers`` processes cost the server: at most their threads'
connections and one, and no queries but the watcher's while LISTEN works; the
watch passes to another process when the watcher stops."""

from __future__ import annotations

import datetime
import signal
import time
import uuid

import pytest
from django.utils import timezone

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import other_connection, start_workers, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

#: A heartbeat and a sweep too rare to play a part in a test: what it sees is the listener's and the watcher's doing.
QUIET = dict(ORCHESTRATION_HEARTBEAT_INTERVAL="25", ORCHESTRATION_STUCK_AFTER="120", ORCHESTRATION_POLL_INTERVAL="0.5")


def backends(name: str) -> dict[int, object]:
    """The server connections of the processes started with application name ``name``: pid to last state change."""
    with other_connection() as other:
        rows = other.execute("SELECT pid, state_change FROM pg_stat_activity WHERE application_name = %s", [name])
        return dict(rows.fetchall())


def started_idle(workers, name: str, *args: str):
    process = start_workers(*args, env=worker_env(PGAPPNAME=name, **QUIET))
    workers.append(process)
    assert wait_for(lambda: "starting" in process.log_path.read_text(), timeout=90), process.log_path.read_text()
    return process


def test_idle_process__holds_at_most_its_threads_connections_and_one(workers):
    name = f"idle-{uuid.uuid4().hex[:8]}"
    started_idle(workers, name, "--concurrency", "3")
    time.sleep(3)  # its threads claimed once, found nothing and wait
    # A thread connects at its first claim; those that asked while another's claim found nothing never have.
    assert 2 <= len(backends(name)) <= 3 + 1


def test_idle_processes__run_no_query_but_the_watchers_look_at_timers(workers):
    name = f"idle-{uuid.uuid4().hex[:8]}"
    started_idle(workers, name, "--concurrency", "2")
    started_idle(workers, name, "--concurrency", "2")
    time.sleep(3)
    before = backends(name)
    time.sleep(3)  # six poll intervals
    after = backends(name)
    assert 2 * 2 <= len(after) <= 2 * (2 + 1)  # each: its listener's, and its threads' that have claimed
    moved = [pid for pid, changed in after.items() if before.get(pid) != changed]
    assert len(moved) == 1  # the watcher's connection


def test_timer__is_claimed_by_another_process_once_the_watcher_stopped(workers):
    name = f"idle-{uuid.uuid4().hex[:8]}"
    watcher = started_idle(workers, name, "--concurrency", "1")
    assert wait_for(lambda: "watching timers" in watcher.log_path.read_text())
    other = started_idle(workers, name, "--concurrency", "1")
    watcher.send_signal(signal.SIGTERM)
    watcher.wait(timeout=30)
    assert wait_for(lambda: "watching timers" in other.log_path.read_text(), timeout=5), other.log_path.read_text()
    workflow = start_workflow("echo", "later", run_after=timezone.now() + datetime.timedelta(seconds=1))
    assert wait_for(lambda: Workflow.objects.get(pk=workflow.pk).status == "completed", timeout=10), (
        other.log_path.read_text()
    )


def test_idle_processes__leave_the_stuck_sweep_to_the_watcher_and_try_no_lock_while_it_is_heard(workers):
    name = f"idle-{uuid.uuid4().hex[:8]}"
    often = dict(ORCHESTRATION_HEARTBEAT_INTERVAL="0.5", ORCHESTRATION_STUCK_AFTER="3")  # a sweep every 0.75 s
    for _ in range(3):
        workers.append(start_workers("--concurrency", "1", env=worker_env(PGAPPNAME=name, **often)))
    assert wait_for(lambda: all("starting" in process.log_path.read_text() for process in workers), timeout=90)
    time.sleep(2)
    seen: dict[int, set[str]] = {}
    with other_connection() as other:
        deadline = time.monotonic() + 4  # eight heartbeats and five sweeps of each process
        while time.monotonic() < deadline:
            rows = other.execute("SELECT pid, query FROM pg_stat_activity WHERE application_name = %s", [name])
            for pid, query in rows:
                seen.setdefault(pid, set()).add(query)
            time.sleep(0.02)
    # A sweep ends with its COMMIT, and taking the watch is a pg_try_advisory_lock: each
    # stays the connection's last query until its next heartbeat.
    sweeping_or_locking = [
        pid for pid, queries in seen.items() if queries & {"COMMIT"} or any("advisory" in query for query in queries)
    ]
    assert len(sweeping_or_locking) == 1, seen

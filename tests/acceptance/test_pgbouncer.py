"""Workers behind PgBouncer in transaction mode: LISTEN never delivers there,
so they notice and poll; everything else works unchanged.

The test starts Debian's ``pgbouncer`` (CI installs the package; the test is
skipped where it is missing) on a free port, in front of the test database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from orchestration import set_queue_limits, start_workflow, start_workflows
from orchestration.models import Workflow, WorkflowStatus
from tests.support import ROOT, run_burst, start_workers, worker_env

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pgbouncer() -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test database; yields its DATABASE_URL."""
    with running_pgbouncer(pool_size=4) as url:
        yield url


@pytest.fixture
def pgbouncer_of_one_connection() -> Iterator[str]:
    """``pgbouncer`` with one server connection, which every client's transactions share in turn."""
    with running_pgbouncer(pool_size=1) as url:
        yield url


@contextlib.contextmanager
def running_pgbouncer(pool_size: int) -> Iterator[str]:
    settings = connection.settings_dict
    user = settings["USER"] or "postgres"
    host = settings["HOST"] or "127.0.0.1"
    if host.startswith("/"):
        pytest.skip("the test database is reached through a Unix socket; PgBouncer needs its TCP address")
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    (directory / "userlist.txt").write_text(f'"{user}" "{settings["PASSWORD"] or ""}"\n')
    (directory / "pgbouncer.ini").write_text(
        f"""[databases]
{settings["NAME"]} = host={host} port={settings["PORT"] or 5432} dbname={settings["NAME"]}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
logfile = {directory / "pgbouncer.log"}
"""
    )
    command = [PGBOUNCER, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        directory.chmod(0o777)
        for path in directory.iterdir():
            path.chmod(0o666)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                log = (directory / "pgbouncer.log").read_text() if (directory / "pgbouncer.log").exists() else ""
                pytest.fail(f"pgbouncer did not start: {log[-2000:]}")
            time.sleep(0.05)
        yield f"postgres://{user}@127.0.0.1:{port}/{settings['NAME']}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def behind(url: str) -> dict[str, str]:
    # Prepared statements need PgBouncer >= 1.21 (max_prepared_statements); Debian 12 has 1.18.
    return worker_env(DATABASE_URL=url, DATABASE_PREPARE_THRESHOLD="")


def test_pgbouncer__runworkers_in_transaction_mode_completes_every_workflow(pgbouncer: str):
    started = start_workflows("three_steps", [{"n": n} for n in range(40)])
    result = run_burst("--concurrency", "6", env=behind(pgbouncer), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    statuses = set(Workflow.objects.filter(pk__in=[w.pk for w in started]).values_list("status", flat=True))
    errors = set(Workflow.objects.exclude(error_message=None).values_list("error_message", flat=True))
    assert statuses == {WorkflowStatus.COMPLETED}, (errors, result.stderr[-3000:])


#: A server connection's settings away from their built-in values (a library
#: loaded adds its own at theirs), and the note the claim once kept in one.
CHANGED_SETTINGS = """SELECT name, setting FROM pg_settings WHERE setting IS DISTINCT FROM boot_val UNION ALL
SELECT 'orchestration.far_from_limit', current_setting('orchestration.far_from_limit', true)"""


def server_connection(url: str) -> tuple[int, dict[str, str]]:
    """The backend a new client of ``url`` is given, and its settings."""
    with psycopg.connect(url, autocommit=True) as client:
        ((pid,),) = client.execute("SELECT pg_backend_pid()").fetchall()
        return pid, dict(client.execute(CHANGED_SETTINGS).fetchall())


def test_pgbouncer__claims_in_a_limited_queues_lanes_leave_nothing_on_the_server_connection_for_the_next_client(
    pgbouncer_of_one_connection: str,
):
    started = start_workflows("echo", [f"limited {n}" for n in range(60)])
    set_queue_limits("default", concurrency=1000)  # far from its limit: the claims take its lanes
    before = server_connection(pgbouncer_of_one_connection)
    result = run_burst("--concurrency", "4", env=behind(pgbouncer_of_one_connection), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(Workflow.objects.filter(pk__in=[w.pk for w in started]).values_list("status", flat=True)) == {
        WorkflowStatus.COMPLETED
    }
    pid, settings = server_connection(pgbouncer_of_one_connection)
    assert pid == before[0], "the same server connection"
    changed = {name: (before[1].get(name), settings.get(name)) for name in {*before[1], *settings}}
    assert {name: change for name, change in changed.items() if change[0] != change[1]} == {}


def test_pgbouncer__listen_delivers_nothing_so_the_worker_says_so_and_polls(pgbouncer: str, workers):
    process = start_workers("--concurrency", "2", "--poll-interval", "0.2", env=behind(pgbouncer))
    workers.append(process)
    deadline = time.monotonic() + 30
    while "polling every" not in process.log_path.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, process.log_path.read_text()
        time.sleep(0.1)
    workflow = start_workflow("echo", "polled")
    deadline = time.monotonic() + 30
    while Workflow.objects.get(pk=workflow.pk).status != WorkflowStatus.COMPLETED:
        assert time.monotonic() < deadline, process.log_path.read_text()
        time.sleep(0.1)
    process.terminate()
    assert process.wait(timeout=30) == 0


def test_pgbouncer__a_caller_behind_it_gets_its_result_by_polling(pgbouncer: str, workers):
    run = start_workflow("echo", "awaited behind pgbouncer")
    code = f"from orchestration import wait_for_result; print('result:', wait_for_result('{run.pk}', timeout=60))"
    with tempfile.TemporaryFile("w+") as log:
        caller = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
            cwd=ROOT,
            env=behind(pgbouncer),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def output() -> str:
            log.seek(0)
            return log.read()

        deadline = time.monotonic() + 30
        while "polling every" not in output():  # the caller's listener found LISTEN deaf, and said so
            assert caller.poll() is None and time.monotonic() < deadline, output()
            time.sleep(0.1)
        workers.append(start_workers("--concurrency", "1", "--poll-interval", "0.2"))
        assert caller.wait(timeout=60) == 0, output()
        assert "result: awaited behind pgbouncer" in output()

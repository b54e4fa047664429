"""``manage.py workflows health`` and ``orchestration.health.health_view``:
each check passes, and fails for its own reason, against a real database."""

from __future__ import annotations

import datetime
import io
import json
import os
import socket
from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from psycopg.sql import SQL, Identifier

from orchestration import health
from orchestration.conf import conf
from tests.factories import WorkflowWorkerFactory
from tests.support import database_conninfo, database_url, other_connection, run_manage, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def probe(*args: str) -> tuple[int, str]:
    """``workflows health`` in this process: its exit status and its lines."""
    out = io.StringIO()
    try:
        call_command("workflows", "health", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def line_of(output: str, check: str) -> str:
    return next(line for line in output.splitlines() if line.split()[1] == f"{check}:")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- database ------------------------------------------------------------------------


def test_health__on_a_migrated_database_that_answers__passes_each_check():
    status, output = probe()
    assert status == 0
    assert line_of(output, "database").startswith("ok")
    assert line_of(output, "migrations").startswith("ok")
    assert f"the last {max(health.known_migrations())}" in output


def test_health__database_down__fails_the_database_check_and_exits_1():
    port = free_port()  # closed: nothing listens there
    done = run_manage("workflows", "health", env=worker_env(DATABASE_URL=database_url(host="127.0.0.1", port=port)))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [line for line in done.stdout.splitlines() if "database" in line]
    assert f"FAIL  database: 127.0.0.1:{port}/" in done.stdout
    assert "did not answer" in done.stdout


def test_health__database_that_never_answers__fails_within_its_timeout():
    with socket.socket() as silent:  # accepts connections and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        env = worker_env(DATABASE_URL=database_url(host="127.0.0.1", port=port))
        done = run_manage("workflows", "health", "--timeout", "1", env=env, timeout=30)
    assert done.returncode == 1
    assert "FAIL  database:" in done.stdout
    assert "timeout" in done.stdout.lower()


# -- migrations ----------------------------------------------------------------------


@pytest.fixture
def recorded_database() -> Iterator[str]:
    """A database of its own whose ``django_migrations`` the test writes: the
    migrations check reads only that table."""
    name = f"{connection.settings_dict['NAME']}_health"[:63]
    with other_connection() as admin:
        admin.execute(SQL("DROP DATABASE IF EXISTS {}").format(Identifier(name)))
        admin.execute(SQL("CREATE DATABASE {}").format(Identifier(name)))
    try:
        yield name
    finally:
        with other_connection() as admin:
            admin.execute(SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(name)))


def record(database: str, names: set[str]) -> None:
    with psycopg.connect(database_conninfo(dbname=database), autocommit=True) as other:
        other.execute(
            "CREATE TABLE django_migrations (id serial PRIMARY KEY, app varchar(255), name varchar(255), "
            "applied timestamptz NOT NULL DEFAULT now())"
        )
        other.execute("INSERT INTO django_migrations (app, name) VALUES ('contenttypes', '0001_initial')")
        for name in sorted(names):
            other.execute("INSERT INTO django_migrations (app, name) VALUES ('orchestration', %s)", [name])


def test_health__migration_not_applied__fails_the_migrations_check_naming_it(recorded_database):
    known = health.known_migrations()
    record(recorded_database, known - {max(known)})
    done = run_manage("workflows", "health", env=worker_env(DATABASE_NAME=recorded_database))
    assert done.returncode == 1
    assert line_of(done.stdout, "database").startswith("ok")
    assert line_of(done.stdout, "migrations") == f"FAIL  migrations: not applied: {max(known)} (run manage.py migrate)"


def test_health__database_migrated_by_a_newer_release__says_so(recorded_database):
    record(recorded_database, health.known_migrations() | {"0999_from_a_newer_release"})
    done = run_manage("workflows", "health", env=worker_env(DATABASE_NAME=recorded_database))
    assert done.returncode == 1
    migrations = line_of(done.stdout, "migrations")
    assert migrations.startswith("FAIL  migrations: the database was migrated by a newer release of orchestration")
    assert "0999_from_a_newer_release unknown to this code" in migrations


def test_health__never_migrated__says_to_run_migrate(recorded_database):
    done = run_manage("workflows", "health", env=worker_env(DATABASE_NAME=recorded_database))
    assert done.returncode == 1
    assert line_of(done.stdout, "migrations") == "FAIL  migrations: no migration is recorded: run manage.py migrate"


def test_health__skip_migrations__leaves_the_check_out(recorded_database):
    record(recorded_database, {"0999_from_a_newer_release"})
    done = run_manage("workflows", "health", "--skip-migrations", env=worker_env(DATABASE_NAME=recorded_database))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migrations" not in done.stdout


# -- a worker ------------------------------------------------------------------------


def seconds_ago(seconds: float) -> datetime.datetime:
    return timezone.now() - datetime.timedelta(seconds=seconds)


def test_health_worker__heartbeat_within_stuck_after__passes():
    worker = WorkflowWorkerFactory(last_seen_at=seconds_ago(2))
    status, output = probe("--worker", worker.pk)
    assert status == 0
    assert line_of(output, "worker") == f"ok    worker: {worker.pk}: heartbeat 2 s ago"


def test_health_worker__no_heartbeat_for_stuck_after__fails_as_stale():
    worker = WorkflowWorkerFactory(last_seen_at=seconds_ago(conf.STUCK_AFTER + 5))
    status, output = probe("--worker", worker.pk)
    assert status == 1
    stale = line_of(output, "worker")
    assert stale.startswith(f"FAIL  worker: {worker.pk}: no heartbeat for {conf.STUCK_AFTER + 5:.0f} s")
    assert line_of(output, "database").startswith("ok")


def test_health_worker__marked_gone_by_the_sweep__fails_as_quarantined():
    worker = WorkflowWorkerFactory(last_seen_at=seconds_ago(1), gone_at=seconds_ago(1))
    status, output = probe("--worker", worker.pk)
    assert status == 1
    assert "marked gone (quarantined) by the stuck sweep" in line_of(output, "worker")


def test_health_worker__stopping__fails_as_stopping():
    worker = WorkflowWorkerFactory(last_seen_at=seconds_ago(1), stopping_since=seconds_ago(3))
    status, output = probe("--worker", worker.pk)
    assert status == 1
    assert line_of(output, "worker") == f"FAIL  worker: {worker.pk} is stopping (for 3 s)"


def test_health_worker__unknown_id__fails_as_not_registered():
    status, output = probe("--worker", "nowhere:1:beef")
    assert status == 1
    assert "no worker nowhere:1:beef is registered" in line_of(output, "worker")


def test_health_this_host__checks_the_newest_row_of_each_process_running_here():
    here = socket.gethostname()
    WorkflowWorkerFactory(host=here, pid=os.getpid(), last_seen_at=seconds_ago(400), started_at=seconds_ago(900))
    newest = WorkflowWorkerFactory(host=here, pid=os.getpid(), last_seen_at=seconds_ago(1))
    WorkflowWorkerFactory(host=here, pid=2**22 + 7, last_seen_at=seconds_ago(4000))  # a process that ended
    status, output = probe("--this-host")
    assert status == 0, output
    assert [line for line in output.splitlines() if " worker:" in line] == [
        f"ok    worker: {newest.pk}: heartbeat 1 s ago"
    ]


def test_health_this_host__no_worker_here__fails():
    WorkflowWorkerFactory(last_seen_at=seconds_ago(1))  # another host's
    status, output = probe("--this-host")
    assert status == 1
    here = socket.gethostname()
    assert line_of(output, "worker") == f"FAIL  worker: no runworkers process of this host ({here}) is registered"


def test_health_json__gives_each_check_for_scripts():
    worker = WorkflowWorkerFactory(last_seen_at=seconds_ago(conf.STUCK_AFTER + 5))
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("workflows", "health", "--json", "--worker", worker.pk, stdout=out)
    found = json.loads(out.getvalue())
    assert found["healthy"] is False
    assert [(check["name"], check["ok"]) for check in found["checks"]] == [
        ("database", True),
        ("migrations", True),
        ("worker", False),
    ]


# -- the web side --------------------------------------------------------------------


def test_health_view__database_and_migrations_pass__answers_200(client):
    response = client.get("/health/")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "migrations": "ok"}}
    assert "no-cache" in response["Cache-Control"]


def test_health_view__database_down__answers_503_saying_nothing_of_it(client, monkeypatch):
    port = free_port()
    monkeypatch.setitem(connection.settings_dict, "PORT", str(port))
    monkeypatch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
    response = client.get("/health/")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "failed"}}
    body = response.content.decode()
    assert str(port) not in body and connection.settings_dict["NAME"] not in body


def test_health_view__refuses_anything_but_a_read(client):
    assert client.post("/health/").status_code == 405

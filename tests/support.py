"""What the tests share: running workflows in the test's thread, worker
processes on the test database, connections of their own to it, and a log
handler that keeps what it handles."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import psycopg
from asgiref.sync import sync_to_async
from django.db import connection, connections
from psycopg.sql import SQL, Identifier

from orchestration.claim import claims
from orchestration.listen import NOTIFY_CHANNEL
from orchestration.models import Workflow, WorkflowStatus
from orchestration.worker import execute

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

#: The header that reads the example project's /metrics/ (tests.settings.METRICS_TOKEN).
METRICS_AUTH = {"HTTP_AUTHORIZATION": "Bearer test-metrics-token"}


class RecordingHandler(logging.Handler):
    """Keeps each record it handles, with the name of the thread that handled it."""

    def __init__(self) -> None:
        super().__init__()
        self.handled: list[tuple[logging.LogRecord, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.handled.append((record, threading.current_thread().name))

    @property
    def records(self) -> list[logging.LogRecord]:
        return [record for record, _ in self.handled]


def as_migrate_left_them() -> None:
    """The tables and their statistics as a new database's: empty, with no dead rows.
    Earlier tests' rolled-back rows would otherwise stay in the tables and their
    indexes, and an ANALYZE would price each index by its dead entries. TRUNCATE
    in the test's transaction is undone with it."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE workflows, workflow_steps CASCADE")
        cursor.execute("ANALYZE workflows, workflow_steps")


def drain(max_runs: int = 100, *, hurry_retries: bool = True) -> list[str]:
    """Claim and run workflows in this thread (inside the test's transaction)
    until none is due, making retries due at once (not timers or waits).
    Returns the outcomes."""
    outcomes = []
    for _ in range(max_runs):
        if hurry_retries:
            Workflow.objects.filter(status=WorkflowStatus.PENDING, waiting_for__isnull=True).update(run_after=None)
        runs = claims.claim("test-worker", None)
        if not runs:
            return outcomes
        outcomes.append(execute(runs[0]))
    raise AssertionError(f"still claiming after {max_runs} runs")


def later(seconds: float, action: Any) -> threading.Thread:
    """Run ``action`` from another thread, on its own connection, after ``seconds``."""

    def run() -> None:
        threading.Event().wait(seconds)
        try:
            action()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, then close the connection Django's async ORM
    opened in its thread for sync work (as a server's request end would)."""

    async def and_close() -> T:
        try:
            return await main
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(and_close())


def worker_env(**extra: str) -> dict[str, str]:
    # The run's settings module (pytest --ds: tests.naive_time_settings too); not
    # settings.SETTINGS_MODULE, which override_settings hides.
    settings_module = os.environ.get("DJANGO_SETTINGS_MODULE", "tests.settings")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, "PYTHONUNBUFFERED": "1"}
    env["DATABASE_NAME"] = connection.settings_dict["NAME"]
    env.update(extra)
    return env


def database_url(*, host: str | None = None, port: int | None = None, **options: str) -> str:
    """A ``DATABASE_URL`` to the test database (at ``host`` and ``port`` when
    given), with libpq ``options`` in its query string."""
    params = connection.get_connection_params()
    user = quote(params.get("user") or "", safe="")
    password = quote(params.get("password") or "", safe="")
    host = host or params.get("host") or ""
    port = port or params.get("port")
    netloc = f"{user}:{password}@" if password else f"{user}@"
    netloc += quote(host, safe="") + (f":{port}" if port else "")
    query = f"?{urlencode(options)}" if options else ""
    return f"postgres://{netloc}/{quote(params['dbname'], safe='')}{query}"


def database_conninfo(**overrides: str | None) -> str:
    """The test database's libpq connection string, with ``overrides`` (None: left out)."""
    params = connection.get_connection_params()
    keys = ("dbname", "user", "password", "host", "port")
    chosen = {**{k: params.get(k) for k in keys}, **overrides}
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in chosen.items() if v})


@contextlib.contextmanager
def other_connection(*, autocommit: bool = True) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own to the test database, as another process would hold."""
    with psycopg.connect(database_conninfo(), autocommit=autocommit) as other:
        yield other


@contextlib.contextmanager
def new_work_listener() -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own listening for the NOTIFY that announces new work
    (so it sees only what other sessions commit)."""
    with other_connection() as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield listener


def runworkers_command(*args: str, python: str | Path = sys.executable, root: Path = ROOT) -> list[str]:
    return [str(python), str(root / "manage.py"), "runworkers", *args]


class WorkerProcess(subprocess.Popen):  # type: ignore[type-arg]
    """A ``runworkers`` process logging to a file: a pipe nobody reads would
    block a busy worker once the pipe's buffer is full."""

    log_path: Path

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout=timeout)
        return self.log_path.read_text(errors="replace"), None


def start_workers(
    *args: str, env: dict[str, str] | None = None, python: str | Path = sys.executable, root: Path = ROOT, **popen: Any
) -> WorkerProcess:
    """A real ``runworkers`` process on the test database (``python`` and ``root``:
    another release's, installed elsewhere)."""
    log = tempfile.NamedTemporaryFile(prefix="runworkers-", suffix=".log", delete=False)  # noqa: SIM115
    process = WorkerProcess(
        runworkers_command(*args, python=python, root=root),
        cwd=root,
        env=env or worker_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        **popen,
    )
    log.close()
    process.log_path = Path(log.name)
    return process


def run_manage(
    command: str, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A management command run to its end in a process of its own, on the test database."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), command, *args],
        cwd=ROOT,
        env=env or worker_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_burst(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_manage("runworkers", "--burst", *args, timeout=timeout, env=env)


SCRATCH_DATABASES = "orchestration_benchmark_%"


def scratch_databases() -> set[str]:
    """The benchmarks' databases on the server (any run's), which each must drop when done."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [SCRATCH_DATABASES])
        return {name for (name,) in cursor.fetchall()}


def run_benchmark(command: str, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """A benchmark command run to its end, and the scratch databases it worked
    in: those its connections (named by ``PGAPPNAME``) were seen in, so that
    another run's benchmark on the same server is never taken for this one's."""
    name = f"benchmark-{uuid.uuid4().hex[:12]}"
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        with other_connection() as other:
            while not done.wait(0.05):
                rows = other.execute(
                    "SELECT DISTINCT datname FROM pg_stat_activity WHERE application_name = %s AND datname LIKE %s",
                    [name, SCRATCH_DATABASES],
                )
                seen.update(datname for (datname,) in rows)

    watcher = threading.Thread(target=watch, name="scratch-databases")
    watcher.start()
    try:
        result = run_manage(command, *args, env=worker_env(PGAPPNAME=name))
    finally:
        done.set()
        watcher.join()
    return result, seen


@contextlib.contextmanager
def read_only_failover() -> Iterator[None]:
    """What a failover to a read-only server looks like to the workers: their
    connections drop, and every new one is read-only, until the block ends.
    Only the test database is changed, and it is always changed back; this
    test's own connection stays writable."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(Identifier(name)))
        try:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            yield
        finally:
            cursor.execute(SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(Identifier(name)))

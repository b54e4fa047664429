"""The failover run: a primary and its synchronous streaming replica, worker
processes on a multi-host URL, the primary stopped at once (``pg_ctl stop -m
immediate``, as a crash) a third of the way through and the replica promoted
(``pg_ctl promote``); then every guarantee is checked as in the chaos run.

Both servers are private (the embedded ``pgserver`` binaries, in a temporary
directory, run as its own system user when this runs as root), the replica
made with ``pg_basebackup``. Run it through ``pytest -m chaos`` or directly:

    python -m tests.acceptance.failover_driver --workflows 300 --processes 3

``--asynchronous`` leaves the replica asynchronous, to see what that costs: the
last commits before the crash may be lost, and their steps run again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.acceptance.chaos_driver import (
    WORKER_SETTINGS,
    WorkerPool,
    count_by_status,
    prepare,
    report,
    start_private_postgres,
    verify,
)


def run_as_server_user(server: Any, program: str, *args: str, pgdata: Path | None = None) -> str:
    """One of the embedded PostgreSQL's programs, as the OS account its servers run as."""
    return str(server.account.run(server.bin / program, *(["-D", str(pgdata)] if pgdata else []), *args))


def start_replica(primary: Any, directory: Path) -> Path:
    """A streaming replica of ``primary`` in ``directory`` (data and socket), started."""
    directory.mkdir(mode=0o700)
    primary.account.give(directory)
    # The embedded server's pg_hba.conf names no replication connections: the replica's, by password too.
    with open(primary.cluster / "pg_hba.conf", "a") as hba:
        hba.write("local replication all scram-sha-256\n")
    run_as_server_user(primary, "pg_ctl", "reload", pgdata=primary.cluster)
    conninfo = f"host={primary.settings()['HOST']} user=postgres password={primary.password()}"
    # -R: standby.signal and primary_conninfo, so that it starts as a replica streaming from the primary
    run_as_server_user(
        primary, "pg_basebackup", "-D", str(directory), "-R", "-X", "stream", "-c", "fast", "-d", conninfo
    )
    # The copy holds the primary's socket lock and log (its socket directory is its data directory).
    for copied in (".s.PGSQL.5432.lock", "server.log"):
        (directory / copied).unlink(missing_ok=True)
    options = f"-c listen_addresses= -k {directory} -c unix_socket_permissions=0700"
    run_as_server_user(
        primary, "pg_ctl", "-w", "-o", options, "-l", str(directory / "server.log"), "start", pgdata=directory
    )
    return directory


def on_primary(sql: str) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall() if cursor.description else []


def make_synchronous(timeout: float = 30) -> None:
    """Commits on the primary wait for the replica's flush from now on. Set
    after the base backup, so that the promoted replica waits for no standby."""
    on_primary("ALTER SYSTEM SET synchronous_standby_names = '*'")
    on_primary("SELECT pg_reload_conf()")
    deadline = time.monotonic() + timeout
    while on_primary("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not become synchronous")
        time.sleep(0.1)


def wait_for_streaming(timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while on_primary("SELECT state FROM pg_stat_replication") != [("streaming",)]:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica is not streaming")
        time.sleep(0.1)


def multi_host_url(password: str, *socket_dirs: Path) -> str:
    hosts = ",".join(quote(str(path), safe="") for path in socket_dirs)
    return f"postgres://postgres:{quote(password, safe='')}@{hosts}/postgres?target_session_attrs=read-write"


def stop(server: Any, data: Path, mode: str) -> None:
    """``immediate`` as a crash: no checkpoint, backends killed, clients cut off."""
    run_as_server_user(server, "pg_ctl", "-w", "-m", mode, "stop", pgdata=data)


def fail_over_under_load(options: argparse.Namespace, directory: Path, primary: Any, replica: Path) -> list[str]:
    url = multi_host_url(primary.password(), Path(primary.settings()["HOST"]), replica)
    prepare(url, options.workflows, options.step_seconds)
    from django.db import connections

    wait_for_streaming()
    if not options.asynchronous:
        make_synchronous()
    mode = "an asynchronous" if options.asynchronous else "a synchronous"
    print(
        f"failover: {options.workflows} three-step workflows, {options.processes} worker processes, "
        f"{mode} replica, a multi-host URL with target_session_attrs=read-write",
        flush=True,
    )

    pool = WorkerPool(options.processes, {**os.environ, **WORKER_SETTINGS}, directory)
    started = time.monotonic()
    stopped_at = resumed_at = None
    completed_before = 0
    while time.monotonic() < started + options.timeout:
        time.sleep(0.2)
        completed = count_by_status().get("completed", 0)
        if completed == options.workflows:
            break
        if stopped_at is None and completed >= options.workflows // 3:
            stop(primary, primary.cluster, "immediate")
            stopped_at, completed_before = time.monotonic(), completed
            connections.close_all()
            run_as_server_user(primary, "pg_ctl", "-w", "promote", pgdata=replica)
            print(
                f"failover: primary stopped (immediate) at {stopped_at - started:.1f}s with {completed} completed; "
                f"replica promoted {time.monotonic() - stopped_at:.1f}s later",
                flush=True,
            )
        elif stopped_at is not None and resumed_at is None and completed > completed_before:
            resumed_at = time.monotonic()
            print(f"failover: runs completing again {resumed_at - stopped_at:.1f}s after the stop", flush=True)
    exit_codes = pool.stop()
    logged = "".join(path.read_text(errors="replace") for path in pool.logs.values())
    print(
        f"failover: {pool.started} worker starts, {time.monotonic() - started:.1f}s, "
        f"final worker exit codes {exit_codes}; the workers logged {logged.count(' WARNING ')} warnings "
        f"({logged.count(' is unavailable')} 'is unavailable') and {logged.count(' ERROR ')} errors",
        flush=True,
    )
    connections.close_all()
    problems = report(verify(options.workflows), options.workflows)
    if stopped_at is None:
        problems.append("the run finished before the failover happened")
    if any(code != 0 for code in exit_codes):
        problems.append(f"a worker did not exit cleanly on SIGTERM: {exit_codes}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--asynchronous", action="store_true", help="leave the replica asynchronous")
    options = parser.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="failover-"))
    primary, _ = start_private_postgres(directory)  # deleted when this process exits
    replica = start_replica(primary, directory / "replica")
    try:
        problems = fail_over_under_load(options, directory, primary, replica)
    finally:
        with contextlib.suppress(RuntimeError):  # the promoted replica, or the replica
            stop(primary, replica, "fast")
    for problem in problems:
        print(f"failover: FAILED: {problem}", flush=True)
    if problems:
        print(f"failover: worker logs kept in {directory}", flush=True)
    else:
        shutil.rmtree(replica, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

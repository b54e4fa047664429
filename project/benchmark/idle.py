"""What idle ``runworkers`` processes cost PostgreSQL: N processes on an empty
queue, then, over a window, the server connections they hold, the
transactions they make (``pg_stat_database``'s commits and rollbacks) and the
CPU of their backends and of themselves.

The benchmark's own reads, on one connection, a transaction each, are subtracted. A backend
reports its counters when it goes idle, at most once a second, so the count
lags by a few seconds at both ends of the window: a window of a minute or
more reads it to within a few percent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from .cpu import CpuMeter, server_backends
from .figures import Figure
from .scratch import ScratchDatabase
from .workers import Workers

#: The processes have settled once their connections stayed the same this many seconds (their
#: starts, their listeners' probes and first claims done; a loaded machine takes a while).
SETTLE_SECONDS = 10.0
TRANSACTIONS = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
#: Connections left for the server's other clients while idle processes are measured.
SPARE_CONNECTIONS = 10
FREE_CONNECTIONS = (
    "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int "
    "- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
)
CONNECTIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
)


def measure_idle(
    database: ScratchDatabase,
    counts: list[int],
    threads: int,
    worker_args: list[str],
    log_dir: Path,
    seconds: float,
    say: Callable[[str], None],
) -> list[Figure]:
    """For each N of ``counts``: N idle processes of ``threads`` threads, measured over ``seconds``."""
    figures: list[Figure] = []
    own = database.scalar(CONNECTIONS)  # the benchmark's own (its migrations' connection)
    for count in counts:
        fitting = _threads_that_fit(database, count, threads)
        if not fitting:
            say(f"idle {count}: not measured: even {count} x (1 + 1) connections exceed the server's free ones")
            continue
        if fitting < threads:
            say(f"idle {count}: {count} x ({threads} + 1) connections exceed the server's free ones; {fitting} threads")
        with Workers(database, count, fitting, worker_args, log_dir, f"idle-{count}") as workers:
            _settle(database, own)
            conninfo = database.conninfo()
            meter = CpuMeter([process.pid for process in workers.processes], server_backends(conninfo))
            # One connection reads it all: its own transactions, one a statement, are known exactly.
            with psycopg.connect(conninfo, autocommit=True) as conn:
                before = _scalar(conn, TRANSACTIONS)
                started = time.monotonic()
                most = reads = 0
                while time.monotonic() - started < seconds:
                    time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - started))))
                    most = max(most, _scalar(conn, CONNECTIONS) - own)
                    reads += 1
                elapsed = time.monotonic() - started
                made = _scalar(conn, TRANSACTIONS) - before - 1 - reads  # less its own reads
            worker_cpu, server_cpu = meter.used()
        label = f"idle {count} x {fitting} threads"
        figures += [
            Figure(f"{label}: connections", most, "connections"),
            Figure(f"{label}: transactions", max(0, made) / elapsed, "tx/s"),
            Figure(f"{label}: server CPU", 100 * (server_cpu or 0.0) / elapsed, "% of a core"),
            Figure(f"{label}: workers' CPU", 100 * worker_cpu / elapsed, "% of a core"),
        ]
        say(f"idle {count}: {most} connections, {max(0, made) / elapsed:.2f} tx/s")
    return figures


def _threads_that_fit(database: ScratchDatabase, count: int, threads: int) -> int:
    """The threads each of ``count`` processes may run (``threads`` at most), so
    that their connections, one a thread and one more each (the sizing rule),
    fit in the server's free ones less ``SPARE_CONNECTIONS``; 0: not even one."""
    free = database.scalar(FREE_CONNECTIONS) - SPARE_CONNECTIONS
    return max(0, min(threads, free // count - 1))


def _settle(database: ScratchDatabase, own: int) -> None:
    """Wait until the processes' connections stayed the same for ``SETTLE_SECONDS`` (two minutes at most)."""
    deadline = time.monotonic() + 120
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = database.scalar(CONNECTIONS) - own
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_SECONDS:
            return
        time.sleep(0.5)


def _scalar(conn: psycopg.Connection[Any], sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])  # type: ignore[index]

"""The limit: what a bare psycopg loop gets out of the same PostgreSQL.

A table with nothing but an id, a state and a payload; each worker thread
claims one job with ``FOR UPDATE SKIP LOCKED`` and completes it in a single
autocommit statement (one transaction per job). The three-transaction variant
claims, writes one step row and completes in three statements, as the smallest
durable shape of a job with a checkpoint. No Django, no ORM, prepared
statements after a few runs (psycopg's default): every figure of the benchmark
is reported as a ratio of these.

The wake-up floor does for the enqueue-to-start latency what the loops do for
the rates: one statement inserts a job and notifies, and a process per worker
process, listening, claims it on the notification, so the figure holds only
what an idle machine costs (the processes, and the server's backends, waking)
and none of the engine's code.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

SETUP = (
    "DROP TABLE IF EXISTS bench_limit_steps, bench_limit_jobs",
    "CREATE TABLE bench_limit_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "state text NOT NULL DEFAULT 'pending', payload jsonb, finished_at timestamptz)",
    "CREATE INDEX bench_limit_jobs_pending ON bench_limit_jobs (id) WHERE state = 'pending'",
    "CREATE TABLE bench_limit_steps (job_id bigint NOT NULL, step_number integer NOT NULL, output jsonb, "
    "PRIMARY KEY (job_id, step_number))",
)
FILL = "INSERT INTO bench_limit_jobs (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, %s) g"

NEXT = "SELECT id FROM bench_limit_jobs WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
CLAIM_AND_COMPLETE = (
    f"UPDATE bench_limit_jobs SET state = 'done', finished_at = clock_timestamp() WHERE id = ({NEXT}) RETURNING id"
)
CLAIM = f"UPDATE bench_limit_jobs SET state = 'running' WHERE id = ({NEXT}) RETURNING id, payload"
STEP = "INSERT INTO bench_limit_steps (job_id, step_number, output) VALUES (%s, 1, %s)"
COMPLETE = "UPDATE bench_limit_jobs SET state = 'done', finished_at = clock_timestamp() WHERE id = %s"

VARIANTS = ("one_transaction", "three_transactions")

#: Count and steady-state rate of finished rows: 90% of them over the time
#: between the 5th and the 95th percentile of ``finished_at``, so that start-up
#: (processes waking, the enqueuing process still busy) and the last stragglers
#: weigh the same in short and long runs, for the limit and the workers alike.
STEADY_RATE = (
    "SELECT count(*), 0.9 * count(*) / nullif(extract(epoch FROM "
    "percentile_disc(0.95) WITHIN GROUP (ORDER BY finished_at) - "
    "percentile_disc(0.05) WITHIN GROUP (ORDER BY finished_at)), 0)::float8 "
    "FROM {table} WHERE {where}"
)


WAKE_CHANNEL = "bench_limit_wake"
WAKE_SETUP = (
    "DROP TABLE IF EXISTS bench_limit_wakes",
    "CREATE TABLE bench_limit_wakes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "state text NOT NULL DEFAULT 'pending', created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz)",
    "CREATE INDEX bench_limit_wakes_pending ON bench_limit_wakes (id) WHERE state = 'pending'",
)
WAKE_ENQUEUE = (
    "WITH job AS (INSERT INTO bench_limit_wakes DEFAULT VALUES RETURNING id) "
    f"SELECT pg_notify('{WAKE_CHANNEL}', '') FROM job"
)
WAKE_CLAIM = (
    "UPDATE bench_limit_wakes SET state = 'running', started_at = now() WHERE id = ("
    "SELECT id FROM bench_limit_wakes WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)
WAKE_STOP = "stop"


def prepare(conninfo: str, jobs: int) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for statement in SETUP:
            conn.execute(statement)
        conn.execute(FILL, [jobs])
        conn.execute("VACUUM ANALYZE bench_limit_jobs")


def _drain(conninfo: str, variant: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if variant == "one_transaction":
            while conn.execute(CLAIM_AND_COMPLETE).fetchone() is not None:
                pass
            return
        while (row := conn.execute(CLAIM).fetchone()) is not None:
            conn.execute(STEP, [row[0], Jsonb(row[1])])
            conn.execute(COMPLETE, [row[0]])


def _process(conninfo: str, variant: str, threads: int, ready: Any, go: Any) -> None:
    # Connect before the start signal so connection set-up is not timed.
    psycopg.connect(conninfo).close()
    ready.release()
    go.wait()
    workers = [threading.Thread(target=_drain, args=(conninfo, variant)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def measure(conninfo: str, *, jobs: int, processes: int, threads: int, variant: str) -> float:
    """Jobs per second of ``processes`` x ``threads`` loops draining ``jobs`` jobs."""
    if variant not in VARIANTS:
        raise ValueError(variant)
    prepare(conninfo, jobs)
    context = multiprocessing.get_context("spawn")
    ready, go = context.Semaphore(0), context.Event()
    children = [
        context.Process(target=_process, args=(conninfo, variant, threads, ready, go)) for _ in range(processes)
    ]
    for child in children:
        child.start()
    try:
        _all_ready(ready, children, "the limit loop")
    except BaseException:
        for child in children:
            child.terminate()  # the others would drain the jobs for nothing
        raise
    finally:
        go.set()
        for child in children:
            child.join()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        query = STEADY_RATE.format(table="bench_limit_jobs", where="state = 'done'")
        done, rate = conn.execute(query).fetchone()  # type: ignore[misc]
        for statement in ("DROP TABLE bench_limit_steps", "DROP TABLE bench_limit_jobs"):
            conn.execute(statement)
    if any(child.exitcode for child in children) or done != jobs or not rate:
        raise RuntimeError(f"the limit loop finished {done} of {jobs} jobs")
    return float(rate)


def _listen(conninfo: str, ready: Any) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"LISTEN {WAKE_CHANNEL}")
        ready.release()
        while True:
            # Out of the generator before the claim: it holds the connection while it waits.
            if any(notice.payload == WAKE_STOP for notice in conn.notifies(stop_after=1)):
                return
            while conn.execute(WAKE_CLAIM).fetchone() is not None:
                pass


def wake_latencies(conninfo: str, *, samples: int, processes: int) -> list[float]:
    """Milliseconds from each job's insert to its claim (both the server's
    ``now()``, as the engine's figure reads ``created_at`` and ``started_at``),
    with ``processes`` idle listeners and the enqueues paced as the engine's are."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for statement in WAKE_SETUP:
            conn.execute(statement)
        context = multiprocessing.get_context("spawn")
        ready = context.Semaphore(0)
        children = [context.Process(target=_listen, args=(conninfo, ready)) for _ in range(processes)]
        for child in children:
            child.start()
        try:
            _all_ready(ready, children, "the wake-up floor")
            for n in range(samples):
                conn.execute(WAKE_ENQUEUE)
                time.sleep(idle_between_enqueues(n))
        finally:
            for _ in children:
                conn.execute("SELECT pg_notify(%s, %s)", [WAKE_CHANNEL, WAKE_STOP])
            for child in children:
                child.join()
        latencies = [
            row[0]
            for row in conn.execute(
                "SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 FROM bench_limit_wakes"
                " WHERE started_at IS NOT NULL"
            )
        ]
        conn.execute("DROP TABLE bench_limit_wakes")
    if any(child.exitcode for child in children) or len(latencies) != samples:
        raise RuntimeError(f"the wake-up floor claimed {len(latencies)} of {samples} jobs")
    return latencies


def _all_ready(ready: Any, children: list[Any], what: str) -> None:
    """Wait until each of ``children`` has released ``ready`` once (connected,
    listening); raise, naming its exit code, when one ends before it did: a
    child that cannot connect would otherwise leave the benchmark waiting."""
    for _ in children:
        while not ready.acquire(timeout=0.2):
            ended = [child.exitcode for child in children if child.exitcode is not None]
            if ended:
                raise RuntimeError(f"a process of {what} exited (code {ended[0]}) before it started: see its output")


def idle_between_enqueues(n: int) -> float:
    """Seconds between two enqueues of the latency figures: the workers idle
    again, woken at varied phases of their poll."""
    return 0.015 + (n % 7) / 1000

"""Work that arrives one run at a time: a producer starts one-step workflows
at a fixed rate, one ``start_workflow`` at a time, for a while, beside real
``runworkers`` processes; then the CPU a run cost (the workers', and the
whole server's, the producer's inserts included: ``cpu.ServerCpu``), the
start latency (the claim's ``started_at`` less the start's ``created_at``)
and the stalls.

A drain claims many runs a round trip and commits many a transaction; here
each run is claimed, run and completed alone, which is what production
traffic mostly looks like. A rate is sustained when the producer kept it, every
run completed and the p99 start latency stayed under ``SUSTAINED_P99_MS``.
After each rate, a bare INSERT loop at the same rate shows the machine's own
commit tail at that moment: on a busy shared server the p99 is its first.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from django.db import connections

from .cpu import CpuMeter, ServerCpu
from .figures import Figure
from .producer import produce
from .scratch import ScratchDatabase
from .starts import BARE_INSERT
from .workers import Workers, import_path
from .workflows import HISTORY_TYPE, WORKFLOW_TYPE

#: The p99 start latency under which a rate counts as sustained (milliseconds).
SUSTAINED_P99_MS = 10.0
#: A start latency over this is a stall (seconds).
STALL_SECONDS = 0.5
#: Seconds given to the producers' processes to start (Django's imports) before they produce together.
PRODUCERS_START_SECONDS = 5.0
#: Seconds a producer may take beyond its start and its run before it is taken for hung.
PRODUCER_GRACE_SECONDS = 60.0
#: Seconds of the bare INSERT loop after each rate (at most the rate's own).
BARE_SECONDS = 10.0
LATENCIES = (
    "SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 FROM workflows "
    "WHERE status = 'completed' AND workflow_type = %s ORDER BY created_at"
)
#: Finished runs in the table, analyzed, before the producer starts. A table
#: the planner knows to be empty (as TRUNCATE or migrate leaves it) has each
#: backend plan the foreign-key check of a step's row, at its commit, as a
#: scan of the whole table, and keep that plan until autovacuum first
#: analyzes the table (within a minute or two of a new deployment's first
#: runs): on a 30-second run that scan was a fifth of the server's CPU, and
#: grew with every run started. Production's tables are not empty.
HISTORY_ROWS = 10_000


@dataclass
class SteadyRun:
    rate: float
    achieved: float
    started: int
    completed: int
    worker_ms: float
    server_ms: float | None
    p50_ms: float
    p99_ms: float
    worst_ms: float
    stalls: int
    #: A bare INSERT loop's own call times at the same rate, just after (the machine's commit tail).
    bare_p50_ms: float = 0.0
    bare_p99_ms: float = 0.0

    @property
    def sustained(self) -> bool:
        return self.achieved >= 0.95 * self.rate and self.completed == self.started and self.p99_ms < SUSTAINED_P99_MS


def measure_steady(
    database: ScratchDatabase,
    rates: list[float],
    seconds: float,
    processes: int,
    threads: int,
    worker_args: list[str],
    log_dir: Path,
    say: Callable[[str], None],
    producers: int = 1,
) -> list[Figure]:
    """Each of ``rates`` (runs/s) for ``seconds``, on fresh tables and fresh
    worker processes, from ``producers`` producers (more than one: each a
    process of its own, at a share of the rate)."""
    runs = []
    for rate in rates:
        database.reset()
        database.load_finished(HISTORY_TYPE, HISTORY_ROWS)
        database.execute("ANALYZE workflows, workflow_steps")
        with Workers(database, processes, threads, worker_args, log_dir, f"steady-{rate:g}") as workers:
            run = _steady(database, workers, rate, seconds, producers)
        run.bare_p50_ms, run.bare_p99_ms = _bare_inserts(database, rate, min(seconds, BARE_SECONDS))
        say(
            f"steady {rate:g}/s: {run.achieved:.0f}/s started, {run.completed}/{run.started} completed, "
            f"p50 {run.p50_ms:.1f} ms, p99 {run.p99_ms:.1f} ms, {run.stalls} stalls; "
            f"bare INSERT p50 {run.bare_p50_ms:.1f} ms, p99 {run.bare_p99_ms:.1f} ms"
        )
        runs.append(run)
    figures: list[Figure] = []
    for run in runs:
        by = f", {producers} producers" if producers > 1 else ""
        label = f"steady {run.rate:g}/s ({processes} x {threads} threads, {seconds:g}s{by})"
        figures += [
            Figure(f"{label}: started", run.achieved, "workflows/s"),
            Figure(f"{label}: completed", run.completed, "workflows"),
            Figure(f"{label}: workers' CPU a run", run.worker_ms, "ms"),
            Figure(f"{label}: server CPU a run", run.server_ms or 0.0, "ms"),
            Figure(f"{label}: start latency p50", run.p50_ms, "ms"),
            Figure(f"{label}: start latency p99", run.p99_ms, "ms", target=("<", SUSTAINED_P99_MS)),
            Figure(f"{label}: worst start latency", run.worst_ms, "ms"),
            Figure(f"{label}: stalls over {STALL_SECONDS:g}s", run.stalls, "starts"),
            Figure(f"{label}: limit: a bare INSERT's own time p50", run.bare_p50_ms, "ms"),
            Figure(f"{label}: limit: a bare INSERT's own time p99", run.bare_p99_ms, "ms"),
        ]
    sustained = [run.rate for run in runs if run.sustained]
    figures.append(
        Figure(f"steady: highest rate sustained with p99 < {SUSTAINED_P99_MS:g} ms", max(sustained, default=0), "/s")
    )
    return figures


def _steady(database: ScratchDatabase, workers: Workers, rate: float, seconds: float, producers: int = 1) -> SteadyRun:
    conninfo = database.conninfo()
    with database.queue_alias():
        running = []
        if producers == 1:
            connections[database.alias].ensure_connection()  # the producer's backend is measured too
        else:
            start_at = time.time() + PRODUCERS_START_SECONDS
            running = [_producer(database, rate / producers, seconds, start_at) for _ in range(producers)]
            time.sleep(max(0.0, start_at - time.time()))
        meter = CpuMeter([process.pid for process in workers.processes], None)
        server = ServerCpu(conninfo)
        started, elapsed = _produced(running, seconds) if running else produce(rate, seconds)
    with contextlib.suppress(RuntimeError):  # what did not complete is counted below
        database.wait_until_idle(timeout=30)
    worker_cpu, _ = meter.used()
    server_cpu = server.used()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        latencies = [row[0] for row in conn.execute(LATENCIES, [WORKFLOW_TYPE])]
    latencies.sort()
    completed = len(latencies)
    return SteadyRun(
        rate=rate,
        achieved=started / elapsed,
        started=started,
        completed=completed,
        worker_ms=1000 * worker_cpu / max(1, completed),
        server_ms=None if server_cpu is None else 1000 * server_cpu / max(1, started),
        p50_ms=statistics.median(latencies) if latencies else 0.0,
        p99_ms=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0.0,
        worst_ms=latencies[-1] if latencies else 0.0,
        stalls=sum(latency > 1000 * STALL_SECONDS for latency in latencies),
    )


def _producer(database: ScratchDatabase, rate: float, seconds: float, start_at: float) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "project.benchmark.producer", database.source_alias, database.name]
    return subprocess.Popen(
        [*command, str(rate), str(seconds), str(start_at)],
        env={**os.environ, "PYTHONPATH": import_path()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _produced(producers: list[subprocess.Popen[str]], seconds: float) -> tuple[int, float]:
    """The runs the producers started in all, and the longest any took. No
    producer outlives the run: one that fails or hangs ends them all."""
    started, elapsed = 0, 0.0
    try:
        for producer in producers:
            out, err = producer.communicate(timeout=PRODUCERS_START_SECONDS + seconds + PRODUCER_GRACE_SECONDS)
            if producer.returncode != 0:
                raise RuntimeError(f"a producer failed (exit {producer.returncode}): {err[-2000:]}")
            count, took = out.split()
            started, elapsed = started + int(count), max(elapsed, float(took))
    finally:
        for producer in producers:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
    return started, elapsed


def _bare_inserts(database: ScratchDatabase, rate: float, seconds: float) -> tuple[float, float]:
    """The p50 and p99 (ms) of a bare prepared INSERT's own time (its commit
    included), one at ``rate`` a second for ``seconds``, no worker running: the
    tail a start latency cannot go below on this machine at this moment."""
    times: list[float] = []
    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        begun = time.monotonic()
        while (now := time.monotonic()) - begun < seconds:
            due = begun + len(times) / rate
            if due > now:
                time.sleep(due - now)
            began = time.perf_counter()
            conn.execute(BARE_INSERT, [WORKFLOW_TYPE, '{"steps": 1}'], prepare=True)
            times.append(1000 * (time.perf_counter() - began))
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]

"""``manage.py benchmark``: throughput, latency and memory of real ``runworkers``
processes, each figure beside the limit a bare psycopg loop reaches on the same
PostgreSQL in the same run.

Everything happens in two scratch databases created on the server the project
points at (DATABASE_URL, or the embedded one) and dropped at the end: "empty"
for the main figures and "loaded" with finished workflows pre-loaded, so the
two are measured alternately under the same conditions. No user data is read
or written. Worker processes are pointed at a scratch database through the
``DATABASE_NAME`` variable that the example project's settings read.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test.utils import override_settings

from orchestration import queue, start_workflow, start_workflows
from orchestration import sql as orchestration_sql
from orchestration.conf import conf

from . import limit
from .workflows import HISTORY_TYPE, WORKFLOW_TYPE

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"


@dataclass
class Options:
    workflows: int = 2000
    steps: int = 3
    processes: int = 2
    threads: int = 4
    finished_rows: int = 1_000_000
    backlog: int = 10_000
    latency_samples: int = 200
    single_enqueues: int = 500
    repeat: int = 5
    rss_concurrency: int = 8
    worker_args: list[str] = field(default_factory=list)
    keep: bool = False
    #: VACUUM the scratch tables this often (seconds; 0: never), for a server whose autovacuum is off.
    vacuum_every: float = 0


@dataclass
class Figure:
    """One line of the table and one JSON line."""

    metric: str
    value: float
    unit: str
    #: the figure this one is divided by, and the quotient
    ratio_of: str | None = None
    ratio: float | None = None
    #: ``(">=" or "<=", bound)`` on the ratio when ``ratio_of`` is set, else on the value
    target: tuple[str, float] | None = None
    samples: list[float] = field(default_factory=list)

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        checked = self.ratio if self.ratio_of else self.value
        if checked is None:
            return None
        op, bound = self.target
        return checked >= bound if op == ">=" else checked <= bound

    def as_json(self) -> str:
        data = asdict(self)
        data["target"] = f"{self.target[0]} {self.target[1]:g}" if self.target else None
        data["met"] = self.met
        return json.dumps(data)


class Benchmark:
    def __init__(self, options: Options, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.figures: dict[str, Figure] = {}
        self.samples: dict[str, list[float]] = {}
        self.plan: list[str] = []
        self.server: dict[str, str] = {}
        self.log_dir = Path(tempfile.mkdtemp(prefix="orchestration-benchmark-"))
        prefix = f"orchestration_benchmark_{secrets.token_hex(3)}"
        self.empty = ScratchDatabase(f"{prefix}_empty", conf.DATABASE)
        self.loaded = ScratchDatabase(f"{prefix}_loaded", conf.DATABASE)

    # -- the run ---------------------------------------------------------------

    def run(self) -> list[Figure]:
        opts = self.options
        with self.empty.created(keep=opts.keep), self.loaded.created(keep=opts.keep):
            self.say(f"scratch databases {self.empty.name}, {self.loaded.name}; worker logs in {self.log_dir}")
            self.server = self.empty.server_facts()
            stop_vacuum = self._vacuum_in_background()
            self._enqueue_single()
            self._load_finished_rows()
            with (
                Workers(self.empty, opts.processes, opts.threads, opts.worker_args, self.log_dir, "empty") as empty,
                Workers(self.loaded, opts.processes, opts.threads, opts.worker_args, self.log_dir, "loaded"),
            ):
                for round_number in range(1, opts.repeat + 1):
                    self.say(f"round {round_number} of {opts.repeat}")
                    measurements = self._round()
                    if round_number % 2 == 0:  # every other round backwards: no figure always follows the same one
                        measurements.reverse()
                    for name, measure in measurements:
                        self.samples.setdefault(name, []).append(measure())
                self._latency()
                self._figures_from(self.samples)
                self._hot_updates()
                self.figures["worker_rss"] = Figure(
                    "peak RSS of a worker process", max(empty.peak_rss_mb()), "MB", samples=empty.peak_rss_mb()
                )
            self._rss_at_concurrency()
            stop_vacuum()
        return list(self.figures.values())

    def _vacuum_in_background(self) -> Callable[[], None]:
        """With ``vacuum_every``, stand in for an autovacuum that is off."""
        stop = threading.Event()

        def vacuum() -> None:
            while not stop.wait(self.options.vacuum_every):
                for database in (self.empty, self.loaded):
                    with contextlib.suppress(psycopg.Error):
                        database.execute("VACUUM workflows, workflow_steps")

        thread = threading.Thread(target=vacuum, name="benchmark-vacuum", daemon=True)
        if self.options.vacuum_every > 0:
            thread.start()

        def stop_vacuum() -> None:
            stop.set()
            if thread.is_alive():
                thread.join()

        return stop_vacuum

    def _round(self) -> list[tuple[str, Callable[[], float]]]:
        opts = self.options
        conninfo = self.empty.conninfo()
        concurrency = dict(processes=opts.processes, threads=opts.threads)
        return [
            ("limit_1", lambda: limit.measure(conninfo, jobs=opts.workflows, variant="one_transaction", **concurrency)),
            ("one_step", lambda: self._drain(self.empty, opts.workflows, 1)),
            ("loaded", lambda: self._drain(self.loaded, opts.workflows, 1)),
            (
                "limit_3",
                lambda: limit.measure(conninfo, jobs=opts.workflows, variant="three_transactions", **concurrency),
            ),
            ("multi_step", lambda: self._drain(self.empty, opts.workflows, opts.steps)),
            ("backlog", lambda: self._drain(self.empty, opts.backlog, 1, enqueue_key="bulk_enqueue")),
        ]

    def _figures_from(self, samples: dict[str, list[float]]) -> None:
        opts = self.options
        median = {name: statistics.median(values) for name, values in samples.items()}

        def add(key: str, metric: str, unit: str, ratio_of: str | None = None, target: Any = None) -> None:
            ratio = median[key] / median[ratio_of] if ratio_of else None
            label = self.figures[ratio_of].metric if ratio_of and ratio_of in self.figures else ratio_of
            self.figures[key] = Figure(metric, median[key], unit, label, ratio, target, samples[key])

        concurrency = f"{opts.processes} processes x {opts.threads} threads"
        add("limit_1", f"limit: psycopg loop, 1 transaction a job ({concurrency})", "jobs/s")
        add("limit_3", "limit: psycopg loop, 3 transactions a job", "jobs/s")
        add("bulk_enqueue", f"enqueue, start_workflows() of {opts.backlog}", "workflows/s", target=(">=", 20000))
        add("one_step", "one-step workflows, runworkers", "workflows/s", "limit_1", (">=", 0.40))
        add(
            "multi_step",
            f"{opts.steps}-step workflows, runworkers",
            "workflows/s",
            "limit_3",
            (">=", 0.35) if opts.steps == 3 else None,
        )
        add("backlog", f"one-step, draining a {opts.backlog} backlog", "workflows/s", "one_step", (">=", 0.95))
        add(
            "loaded",
            f"one-step, {opts.finished_rows} finished rows in the table",
            "workflows/s",
            "one_step",
            (">=", 0.95),
        )

    # -- phases ----------------------------------------------------------------

    def _enqueue_single(self) -> None:
        count = self.options.single_enqueues
        with self.empty.queue_alias():
            started = time.perf_counter()
            for n in range(count):
                start_workflow(WORKFLOW_TYPE, {"steps": 1, "n": n})
            elapsed = time.perf_counter() - started
        self.empty.reset()
        self.figures["single_enqueue"] = Figure(
            "enqueue, start_workflow() one at a time", count / elapsed, "workflows/s"
        )

    def _load_finished_rows(self) -> None:
        rows = self.options.finished_rows
        self.say(f"loading {rows} finished workflows (one step each) into {self.loaded.name}")
        started = time.perf_counter()
        self.loaded.execute(LOAD_FINISHED, [HISTORY_TYPE, rows, rows])
        self.loaded.execute(LOAD_FINISHED_STEPS, [HISTORY_TYPE])
        self.figures["load"] = Figure(
            "pre-load of finished workflows (INSERT ... generate_series)",
            rows / (time.perf_counter() - started),
            "rows/s",
        )
        self.plan = self._claim_plan()

    def _claim_plan(self) -> list[str]:
        """EXPLAIN (ANALYZE, BUFFERS) of the claim on the loaded table, with a
        backlog inserted in the same (rolled back) transaction."""
        if not hasattr(queue, "claim_statement"):
            return []
        sql, params = queue.claim_statement("benchmark-explain", None, self.options.threads)
        probe = min(self.options.backlog, 1000)
        with psycopg.connect(self.loaded.conninfo()) as conn:
            conn.execute(ENQUEUE_PROBE, [WORKFLOW_TYPE, probe])
            conn.execute(orchestration_sql.INDEX_PLANS_ONLY)  # as the workers plan it (sql.run_together)
            plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)]
            conn.rollback()
        return plan

    def _drain(self, database: ScratchDatabase, count: int, steps: int, enqueue_key: str | None = None) -> float:
        """Bulk-start ``count`` workflows while the workers idle, and return the
        steady rate at which they finish them (see ``limit.STEADY_RATE``)."""
        if database is self.empty:
            database.reset()
        with database.queue_alias():
            started = time.perf_counter()
            workflows = start_workflows(WORKFLOW_TYPE, [{"steps": steps}] * count)
            enqueue_seconds = time.perf_counter() - started
        if enqueue_key:
            self.samples.setdefault(enqueue_key, []).append(count / enqueue_seconds)
        ids = [workflow.pk for workflow in workflows]
        database.wait_until_idle(timeout=60 + count * steps / 50)
        failed = database.scalar("SELECT count(*) FROM workflows WHERE id = ANY(%s) AND status <> 'completed'", [ids])
        done, rate = database.one(limit.STEADY_RATE.format(table="workflows", where="id = ANY(%s)"), [ids])
        if failed or done != count or not rate:
            raise RuntimeError(f"{count - failed} of {count} benchmark workflows completed; see {self.log_dir}")
        self.say(f"  {count} x {steps}-step on {database.label}: {rate:,.0f}/s")
        return rate

    def _latency(self) -> None:
        samples = self.options.latency_samples
        self.empty.reset()
        ids = []
        with self.empty.queue_alias():
            for n in range(samples):
                ids.append(start_workflow(WORKFLOW_TYPE, {"steps": 1, "n": n}).pk)
                time.sleep(0.015 + (n % 7) / 1000)  # idle again, at varied phases of their poll
        self.empty.wait_until_idle(timeout=60)
        with psycopg.connect(self.empty.conninfo()) as conn:
            latencies = [
                row[0]
                for row in conn.execute(
                    "SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 "
                    "FROM workflows WHERE id = ANY(%s)",
                    [ids],
                )
            ]
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        idle = f"{self.options.processes} x {self.options.threads} idle threads"
        self.figures["latency_p50"] = Figure(f"enqueue-to-start p50 ({idle})", p50, "ms", target=("<=", 2.5))
        self.figures["latency_p99"] = Figure("enqueue-to-start p99", p99, "ms", target=("<=", 6.0), samples=latencies)

    def _hot_updates(self) -> None:
        """Share of row updates that were HOT (no index touched), over the whole run."""
        time.sleep(1)  # the backends' statistics reach pg_stat_user_tables within a second
        rows = self.empty.all(
            "SELECT relname, 100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0) FROM pg_stat_user_tables "
            "WHERE relname IN ('workflows', 'workflow_steps') ORDER BY relname DESC"
        )
        for table, share in rows:
            self.figures[f"hot_{table}"] = Figure(f"HOT updates of {table} rows", float(share or 0), "%")

    def _rss_at_concurrency(self) -> None:
        concurrency = self.options.rss_concurrency
        with Workers(self.empty, 1, concurrency, self.options.worker_args, self.log_dir, "rss") as workers:
            self._drain(self.empty, self.options.workflows, self.options.steps)
            peak = workers.peak_rss_mb()[0]
        self.figures["rss"] = Figure(
            f"peak RSS, runworkers --concurrency {concurrency}", peak, "MB", target=("<=", 120)
        )


class ScratchDatabase:
    """A database this run creates, migrates and drops; never a user's."""

    def __init__(self, name: str, alias: str) -> None:
        self.name = name
        self.label = name.rsplit("_", 1)[-1]
        self.source_alias = alias
        self.alias = f"benchmark_{self.label}"

    @contextlib.contextmanager
    def created(self, keep: bool = False) -> Iterator[None]:
        with connections[self.source_alias].cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{self.name}"')
        connections.settings[self.alias] = {**connections.settings[self.source_alias], "NAME": self.name}
        try:
            call_command("migrate", "orchestration", database=self.alias, verbosity=0)
            yield
        finally:
            connections[self.alias].close()
            if not keep:
                with connections[self.source_alias].cursor() as cursor:
                    cursor.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    @contextlib.contextmanager
    def queue_alias(self) -> Iterator[None]:
        """Point the app's ORCHESTRATION["DATABASE"] at this database."""
        with override_settings(ORCHESTRATION={**getattr(settings, "ORCHESTRATION", {}), "DATABASE": self.alias}):
            yield

    def server_facts(self) -> dict[str, str]:
        facts = {name: self.scalar(f"SHOW {name}") for name in ("server_version", "autovacuum", "synchronous_commit")}
        return {**facts, "cpus": str(os.cpu_count())}

    def reset(self) -> None:
        """Empty the tables, analyzed as ``migrate`` leaves them (TRUNCATE drops what ANALYZE knew)."""
        self.execute("TRUNCATE workflows CASCADE")
        self.execute("ANALYZE workflows, workflow_steps")

    def conninfo(self) -> str:
        params = connections[self.source_alias].get_connection_params()
        keys = ("user", "password", "host", "port")
        return psycopg.conninfo.make_conninfo(dbname=self.name, **{k: params[k] for k in keys if params.get(k)})

    def execute(self, sql: str, params: Any = None) -> None:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(sql, params)

    def one(self, sql: str, params: Any = None) -> Any:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = None) -> list[Any]:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Any = None) -> Any:
        return self.one(sql, params)[0]

    def wait_until_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            busy = "SELECT EXISTS (SELECT FROM workflows WHERE status IN ('pending', 'running'))"
            while conn.execute(busy).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workflows still pending or running after {timeout:.0f}s in {self.name}")
                time.sleep(0.02)


class Workers:
    """``processes`` real ``runworkers`` processes on a scratch database."""

    def __init__(
        self, database: ScratchDatabase, processes: int, threads: int, args: list[str], log_dir: Path, label: str
    ) -> None:
        self.database = database
        self.count = processes
        self.command = [sys.executable, str(MANAGE_PY), "runworkers", "--concurrency", str(threads), *args]
        self.threads = threads
        self.log_dir = log_dir
        self.label = label
        self.processes: list[subprocess.Popen[bytes]] = []
        self.listening = "--no-listen" not in args

    def __enter__(self) -> Workers:
        env = {**os.environ, "DATABASE_NAME": self.database.name, "PYTHONUNBUFFERED": "1"}
        # As deployed: DEBUG off (with it, Django keeps every query of every thread in memory).
        env.update(DEBUG="False", SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(32))
        for n in range(self.count):
            log = open(self.log_dir / f"{self.label}-{n + 1}.log", "ab")
            self.processes.append(
                subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=MANAGE_PY.parent)
            )
            log.close()
        self._wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _wait_ready(self) -> None:
        """Until every thread of every process is connected (and has idled)."""
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'"
        expected = self.count * (self.threads + (2 if self.listening else 1))  # + the sweeper, the listener
        deadline = time.monotonic() + 60
        while self.database.scalar(query, [self.database.name]) < expected:
            if any(process.poll() is not None for process in self.processes) or time.monotonic() > deadline:
                raise RuntimeError(f"runworkers did not start; see {self.log_dir}")
            time.sleep(0.05)
        time.sleep(0.5)  # the listeners have checked that notifications arrive

    def peak_rss_mb(self) -> list[float]:
        peaks = []
        for process in self.processes:
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{process.pid}/status").read_text()
                kilobytes = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
                peaks.append(kilobytes / 1024)
        return peaks


LOAD_FINISHED = """
INSERT INTO workflows (workflow_type, status, input_data, output_data, current_step, attempts,
                       created_at, updated_at, started_at, finished_at, error_message)
SELECT %s, CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'completed' END, jsonb_build_object('n', g), 'null',
       1, 1, t, t + interval '40 ms', t + interval '10 ms', t + interval '40 ms',
       CASE WHEN g %% 50 = 0 THEN 'RuntimeError: pre-loaded failure' END
FROM generate_series(1, %s) g, LATERAL (SELECT now() - make_interval(secs => (%s - g) * 0.1) AS t) ts
"""
LOAD_FINISHED_STEPS = """
INSERT INTO workflow_steps
    (workflow_id, step_number, step_name, status, output_data, started_at, completed_at, attempts)
SELECT id, 1, 'step 1', status, 'null', started_at, finished_at, 1 FROM workflows WHERE workflow_type = %s
"""
ENQUEUE_PROBE = "INSERT INTO workflows (workflow_type, input_data) SELECT %s, '{}' FROM generate_series(1, %s)"

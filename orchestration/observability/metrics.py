"""Prometheus metrics, optional: ``pip install "django-orchestration[prometheus]"``.

``metrics_view`` serves, in the Prometheus text format (or OpenMetrics, when
asked for it):

- gauges read from PostgreSQL at each scrape, by queue and workflow type:
  unfinished workflows by status, those due now, and the age of the oldest
  due one; the live worker processes and their threads, by queue; the
  tables' row estimates. Each query reads unfinished rows through their
  partial indexes, the workers' small table, or the catalog, never the
  finished history, so a scrape stays fast on a table of tens of millions
  of rows (docs/performance.md);
- the counters and histograms the workers keep (``orchestration.observability.observe``):
  attempts started, workflows completed, failed and retried, and the
  durations of attempts and steps. Those of this process, or, with
  ``PROMETHEUS_MULTIPROC_DIR`` set, of every process of the machine that
  shares the directory (README, "Monitoring").

Mount it in ``urls.py``: ``path("metrics/", metrics_view)``; it asks for no
login, so serve it where only your Prometheus reaches it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import OperationalError, connections
from django.http import HttpRequest, HttpResponse

from ..conf import conf
from ..registry import known_queues, registered_workflows
from ..reports import stats
from . import observe

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "Prometheus metrics need the prometheus_client package: "
    'pip install "django-orchestration[prometheus]" (or pip install prometheus-client).\n'
)

#: The statuses ``orchestration_workflows`` counts, each type's reading 0 when it has none.
UNFINISHED = ("pending", "running", "paused")

#: Seconds the database's gauges may take before PostgreSQL cancels them;
#: the scrape then says so (``orchestration_metrics_database_up 0``).
TIME_LIMIT = 5.0

# The runs due now and those running, by three ranges of partial indexes
# (idx_workflows_due, idx_workflows_waiting up to now, idx_workflows_running):
# however many runs wait, none is read here. Those are counted apart
# (``stats.waiting_runs``: exactly up to 10,000, past that from a sample).
# The paused, held by an operator (neither due nor stuck), through idx_workflows_status.
UNFINISHED_SQL = """
SELECT
    queue,
    workflow_type,
    status,
    COUNT(*) AS workflows,
    COUNT(*) FILTER (WHERE status = 'pending') AS due,
    EXTRACT(EPOCH FROM now() - MIN(GREATEST(created_at, run_after)) FILTER (WHERE status = 'pending'))
        AS oldest_due_seconds
FROM (
    SELECT queue, workflow_type, status, created_at, run_after FROM workflows
    WHERE status = 'pending' AND run_after IS NULL
    UNION ALL
    SELECT queue, workflow_type, status, created_at, run_after FROM workflows
    WHERE status = 'pending' AND run_after <= now()
    UNION ALL
    SELECT queue, workflow_type, status, created_at, run_after FROM workflows WHERE status = 'running'
    UNION ALL
    SELECT queue, workflow_type, status, created_at, run_after FROM workflows WHERE status = 'paused'
) AS unfinished
GROUP BY queue, workflow_type, status
"""

WORKERS_SQL = """
SELECT
    queues,
    concurrency,
    CASE
        WHEN gone_at IS NOT NULL THEN 'gone'
        WHEN last_seen_at < now() - make_interval(secs => %s) THEN 'silent'
        ELSE 'live'
    END AS state
FROM workflow_workers
"""

TABLE_ROWS_SQL = """
SELECT relname, GREATEST(reltuples, 0)::bigint
FROM pg_class
WHERE oid IN ('workflows'::regclass, 'workflow_steps'::regclass)
"""


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in the Prometheus text format; without ``prometheus_client``, a 501 saying how to install it."""
    try:
        import prometheus_client
        from prometheus_client.exposition import choose_encoder
    except ImportError:
        return HttpResponse(INSTALL_HINT, status=501, content_type="text/plain; charset=utf-8")
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(WorkerInstruments())
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(registry), content_type=content_type)


class WorkerInstruments:
    """The workers' counters and histograms: this process's, or every process's
    of the machine in multiprocess mode."""

    def collect(self) -> Iterator[Any]:
        instruments = observe.instruments()
        if observe.shared_between_processes():
            from prometheus_client import CollectorRegistry, multiprocess

            shared = CollectorRegistry(auto_describe=False)
            multiprocess.MultiProcessCollector(shared)
            yield from shared.collect()
        elif instruments is not None:
            yield from instruments.registry.collect()


def _with_waiting(unfinished: list[tuple[Any, ...]], waiting: stats.WaitingRuns) -> list[tuple[Any, ...]]:
    """``UNFINISHED_SQL``'s rows with the runs that wait added to each pending
    count: pending too, neither due nor aged."""
    runs: dict[tuple[str, str], int] = {}
    for queue, workflow_type, _kind, count in waiting.rows:
        runs[(queue, workflow_type)] = runs.get((queue, workflow_type), 0) + count
    rows = []
    for queue, workflow_type, status, workflows, *due in unfinished:
        waits = runs.pop((queue, workflow_type), 0) if status == "pending" else 0
        rows.append((queue, workflow_type, status, workflows + waits, *due))
    return rows + [(queue, workflow_type, "pending", count, 0, None) for (queue, workflow_type), count in runs.items()]


class DatabaseCollector:
    """The gauges read from PostgreSQL at each scrape."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        started = time.monotonic()
        try:
            with stats.time_limit(TIME_LIMIT):
                unfinished, workers, tables = self._read()
        except OperationalError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
                raise
            logger.warning("metrics: the database's gauges took longer than %ss and were cancelled", TIME_LIMIT)
            yield GaugeMetricFamily(
                "orchestration_metrics_database_up", "1 if the gauges read from PostgreSQL are here.", value=0
            )
            return
        yield from self._unfinished(unfinished)
        yield from self._workers(workers)
        by_table = GaugeMetricFamily(
            "orchestration_table_rows_estimate", "Rows of the table, as the planner estimates.", labels=["table"]
        )
        for table, rows in tables:
            by_table.add_metric([table], rows)
        yield by_table
        yield GaugeMetricFamily(
            "orchestration_metrics_database_up", "1 if the gauges read from PostgreSQL are here.", value=1
        )
        yield GaugeMetricFamily(
            "orchestration_metrics_database_seconds",
            "Seconds the gauges took to read from PostgreSQL.",
            value=time.monotonic() - started,
        )

    @staticmethod
    def _read() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with connections[conf.DATABASE].cursor() as cursor:
            cursor.execute(UNFINISHED_SQL)
            unfinished = cursor.fetchall()
        unfinished = _with_waiting(unfinished, stats.waiting_runs())
        with connections[conf.DATABASE].cursor() as cursor:
            cursor.execute(WORKERS_SQL, [float(conf.STUCK_AFTER)])
            workers = cursor.fetchall()
            cursor.execute(TABLE_ROWS_SQL)
            tables = cursor.fetchall()
        return unfinished, workers, tables

    @staticmethod
    def _unfinished(rows: list[tuple[Any, ...]]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["queue", "workflow_type"]
        by_status = GaugeMetricFamily(
            "orchestration_workflows",
            "Unfinished workflows, by status (the pending that wait: estimated past 10,000).",
            labels=[*labels, "status"],
        )
        due = GaugeMetricFamily("orchestration_workflows_due", "Pending workflows due now.", labels=labels)
        oldest = GaugeMetricFamily(
            "orchestration_oldest_due_seconds", "Seconds the oldest due workflow has been due.", labels=labels
        )
        # Every registered type reads 0 when it has nothing, rather than vanishing.
        counts = {(d.queue, name, s): 0 for name, d in registered_workflows().items() for s in UNFINISHED}
        due_counts = {(d.queue, name): 0 for name, d in registered_workflows().items()}
        ages = dict.fromkeys(due_counts, 0.0)
        for queue, workflow_type, status, workflows, due_now, oldest_due in rows:
            counts[(queue, workflow_type, status)] = workflows
            if status == "pending":
                due_counts[(queue, workflow_type)] = due_now
                ages[(queue, workflow_type)] = float(oldest_due or 0)
        for (queue, workflow_type, status), value in sorted(counts.items()):
            by_status.add_metric([queue, workflow_type, status], value)
        for (queue, workflow_type), value in sorted(due_counts.items()):
            due.add_metric([queue, workflow_type], value)
            oldest.add_metric([queue, workflow_type], max(ages[(queue, workflow_type)], 0.0))
        yield from (by_status, due, oldest)

    @staticmethod
    def _workers(rows: list[tuple[Any, ...]]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        processes = GaugeMetricFamily(
            "orchestration_worker_processes",
            "runworkers processes: live, silent (no heartbeat for STUCK_AFTER), gone (marked by the sweep).",
            labels=["state"],
        )
        by_queue = GaugeMetricFamily(
            "orchestration_queue_workers", "Live runworkers processes serving the queue.", labels=["queue"]
        )
        threads = GaugeMetricFamily(
            "orchestration_queue_worker_threads", "Threads of the live processes serving the queue.", labels=["queue"]
        )
        queues = known_queues()
        states = dict.fromkeys(("live", "silent", "gone"), 0)
        served = dict.fromkeys(queues, 0)
        threads_by_queue = dict.fromkeys(queues, 0)
        for worker_queues, concurrency, state in rows:
            states[state] += 1
            if state != "live":
                continue
            if isinstance(worker_queues, str):  # jsonb, as Django's cursor reads it
                worker_queues = json.loads(worker_queues)
            for queue in worker_queues or queues:  # NULL: every queue
                served[queue] = served.get(queue, 0) + 1
                threads_by_queue[queue] = threads_by_queue.get(queue, 0) + concurrency
        for state, count in states.items():
            processes.add_metric([state], count)
        for queue in sorted(served):
            by_queue.add_metric([queue], served[queue])
            threads.add_metric([queue], threads_by_queue[queue])
        yield from (processes, by_queue, threads)

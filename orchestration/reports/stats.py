"""The monitoring reports, shared by ``workflow_stats`` and the admin overview.

The seed's three queries are its own text, run verbatim (the hours parameter
replaces its literal ``24`` only when asked for another window). The overview's
other figures (queue depth, waiting workflows, outcomes per hour, table health)
are written to stay cheap on a table of millions of finished rows: they read
unfinished rows through the status index, or the statistics views, or one
bounded pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

from django.db import connections, transaction

from ..conf import conf
from ..waits import WaitKind

SUCCESS_RATE_SQL = """
SELECT
    workflow_type,
    COUNT(*) AS total,
    COUNT(*) FILTER (WHERE status = 'completed') AS completed,
    ROUND(100.0 * COUNT(*) FILTER (WHERE status = 'completed') / COUNT(*), 1) AS success_pct
FROM workflows
WHERE created_at > now() - INTERVAL '24 hours'
GROUP BY workflow_type;
"""

# The seed's, verbatim. A paused run is never in it: its status is 'paused', even
# while its worker finishes the step it was in.
STUCK_SQL = """
SELECT id, workflow_type, current_step, updated_at
FROM workflows
WHERE status = 'running'
  AND updated_at < now() - INTERVAL '5 minutes';
"""

STEP_DURATIONS_SQL = """
SELECT
    w.workflow_type,
    ws.step_name,
    ROUND(AVG(EXTRACT(EPOCH FROM (ws.completed_at - ws.started_at)))::numeric, 2) AS avg_seconds
FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.status = 'completed'
GROUP BY w.workflow_type, ws.step_name
ORDER BY avg_seconds DESC;
"""


@dataclasses.dataclass
class Report:
    title: str
    columns: list[str]
    rows: list[tuple[Any, ...]]

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def _run(title: str, sql: str, params: list[Any] | dict[str, Any] | None = None) -> Report:
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(sql, params)
        columns = [column.name for column in cursor.description]
        return Report(title, columns, list(cursor.fetchall()))


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Run the block in one transaction in which PostgreSQL cancels any statement
    that takes longer than ``seconds`` (raising ``django.db.OperationalError``)."""
    with transaction.atomic(using=conf.DATABASE):
        with connections[conf.DATABASE].cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(max(1, round(seconds * 1000)))])
        yield


def success_rate(hours: int = 24) -> Report:
    sql = SUCCESS_RATE_SQL
    if hours != 24:
        sql = sql.replace("INTERVAL '24 hours'", "make_interval(hours => %s)")
    return _run(f"Success rate per workflow type, last {hours} hours", sql, [hours] if hours != 24 else None)


def stuck_workflows() -> Report:
    return _run("Running workflows with no heartbeat for 5 minutes (dead workers)", STUCK_SQL)


def step_durations() -> Report:
    return _run("Average duration of completed steps", STEP_DURATIONS_SQL)


# The seed's report over the steps of the last workflows started, for the
# overview: the seed's own reads every step ever recorded (seconds on millions).
RECENT_STEP_DURATIONS_SQL = """
SELECT
    w.workflow_type,
    s.step_name,
    ROUND(AVG(EXTRACT(EPOCH FROM s.took))::numeric, 2) AS avg_seconds
FROM (SELECT id, workflow_type FROM workflows ORDER BY created_at DESC LIMIT %(workflows)s) w
CROSS JOIN LATERAL (
    -- OFFSET 0 keeps it a lookup of each workflow's steps: joined whole, the
    -- planner would hash every step row of the table.
    SELECT ws.step_name, ws.completed_at - ws.started_at AS took
    FROM workflow_steps ws
    WHERE ws.workflow_id = w.id AND ws.status = 'completed'
    OFFSET 0
) s
GROUP BY w.workflow_type, s.step_name
ORDER BY avg_seconds DESC;
"""

#: Workflows whose steps the overview averages (``recent_step_durations``).
RECENT_WORKFLOWS = 10_000


def recent_step_durations(workflows: int = RECENT_WORKFLOWS) -> Report:
    """``step_durations`` over the steps of the last ``workflows`` workflows started
    (the overview's: one index lookup per workflow, however long the history)."""
    return _run(
        f"Average duration of completed steps, last {workflows:,} workflows",
        RECENT_STEP_DURATIONS_SQL,
        {"workflows": workflows},
    )


def all_reports(hours: int = 24) -> list[Report]:
    return [success_rate(hours), stuck_workflows(), step_durations()]


# Per queue, the runs due now (``waits.pending_q``'s "due": no ``run_after``, or
# one that has passed) and those running, with the oldest due run's creation:
# three ranges of partial indexes (idx_workflows_due, idx_workflows_waiting up
# to now, idx_workflows_running), so that however many runs wait, none is read.
# The runs that wait are counted apart (``waiting_runs``).
QUEUE_DEPTH_SQL = """
SELECT
    queue,
    COUNT(*) FILTER (WHERE status = 'pending') AS due,
    COUNT(*) FILTER (WHERE status = 'running') AS running,
    MIN(created_at) FILTER (WHERE status = 'pending') AS oldest_due
FROM (
    SELECT queue, status, created_at FROM workflows WHERE status = 'pending' AND run_after IS NULL
    UNION ALL
    SELECT queue, status, created_at FROM workflows WHERE status = 'pending' AND run_after <= now()
    UNION ALL
    SELECT queue, status, created_at FROM workflows WHERE status = 'running'
) AS unfinished
GROUP BY queue
ORDER BY queue;
"""

#: Up to this many runs that wait, ``waiting_runs`` counts them exactly.
WAITING_EXACT = 10_000
#: Past ``WAITING_EXACT``, ``waiting_runs`` counts about this many of them, in a sample of the table's pages.
WAITING_SAMPLE = 10_000

# The runs that wait, as the last VACUUM or ANALYZE counted them: the size of the sample to take.
WAITING_LAST_COUNTED_SQL = """
SELECT GREATEST(reltuples, 0)::float8 FROM pg_class WHERE oid = 'idx_workflows_waiting'::regclass;
"""

# The runs that wait (``run_after`` to come), by queue, type and what for
# (``waits.WaitKind``'s value, the prefix of ``waiting_for``; NULL: a retry's
# backoff or a start scheduled for later), of {runs}: ``WAITING_FIRST`` or
# ``WAITING_SAMPLED``, each count scaled by %(scale)s.
WAITING_BY_SQL = """
SELECT queue, workflow_type, split_part(waiting_for, ':', 1) AS kind, round(COUNT(*) * %(scale)s)::bigint AS runs
FROM {runs} AS w
GROUP BY 1, 2, 3;
"""
#: At most %(cap)s runs that wait, by idx_workflows_waiting.
WAITING_FIRST = """(SELECT queue, workflow_type, waiting_for FROM workflows
      WHERE status = 'pending' AND run_after > now() LIMIT %(cap)s)"""
#: The runs that wait in a sample of the table's pages.
WAITING_SAMPLED = """(SELECT queue, workflow_type, waiting_for FROM workflows TABLESAMPLE SYSTEM (%(percent)s)
      WHERE status = 'pending' AND run_after > now())"""


@dataclasses.dataclass(frozen=True)
class WaitingRuns:
    """The pending runs that wait (``run_after`` to come), as ``WAITING_BY_SQL``
    groups them: ``(queue, workflow_type, kind, runs)``, ``kind`` None for a
    backoff or a later start. ``estimated``: scaled from a sample (say "about")."""

    rows: list[tuple[str, str, str | None, int]]
    estimated: bool

    def by_kind(self) -> dict[str, int]:
        """The runs that wait for each ``waits.WaitKind`` value."""
        counts = {kind.value: 0 for kind in WaitKind}
        for _queue, _type, kind, runs in self.rows:
            if kind in counts:
                counts[kind] += runs
        return counts

    def by_queue(self) -> dict[str, tuple[int, int]]:
        """Per queue: the runs that wait for something, and those due later (a backoff, a later start)."""
        counts: dict[str, tuple[int, int]] = {}
        for queue, _type, kind, runs in self.rows:
            waiting, later = counts.get(queue, (0, 0))
            counts[queue] = (waiting + runs, later) if kind else (waiting, later + runs)
        return counts


def waiting_runs() -> WaitingRuns:
    """The pending runs that wait, by queue, type and what for: exactly up to
    ``WAITING_EXACT`` of them; past it, from a sample of the table's pages
    holding about ``WAITING_SAMPLE`` of them, scaled (``estimated``), so that a
    million runs that wait cost the reports a few milliseconds, not a second."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(WAITING_BY_SQL.format(runs=WAITING_FIRST), {"cap": WAITING_EXACT + 1, "scale": 1})
        found = cursor.fetchall()
        estimated = sum(runs for *_, runs in found) > WAITING_EXACT
        if estimated:
            cursor.execute(WAITING_LAST_COUNTED_SQL)
            percent = min(100.0, 100.0 * WAITING_SAMPLE / max(cursor.fetchone()[0], WAITING_EXACT + 1))
            cursor.execute(WAITING_BY_SQL.format(runs=WAITING_SAMPLED), {"percent": percent, "scale": 100.0 / percent})
            found = cursor.fetchall()
    rows = [(queue, type_, kind or None, int(runs)) for queue, type_, kind, runs in found]
    return WaitingRuns(rows, estimated)


# One pass over the rows created since a day before the window (a range of
# idx_workflows_status: no read of the older history), those that finished in
# the window grouped by hour, then joined to every hour of the window so that
# quiet hours read as zero. A run that took more than a day is left out.
HOURLY_OUTCOMES_SQL = """
WITH finished AS (
    SELECT date_trunc('hour', COALESCE(finished_at, updated_at)) AS hour, status
    FROM workflows
    WHERE status IN ('completed', 'failed')
      AND created_at >= date_trunc('hour', now()) - make_interval(hours => %(back)s) - INTERVAL '1 day'
      AND COALESCE(finished_at, updated_at) >= date_trunc('hour', now()) - make_interval(hours => %(back)s)
)
SELECT
    h.hour,
    COUNT(*) FILTER (WHERE f.status = 'completed') AS completed,
    COUNT(*) FILTER (WHERE f.status = 'failed') AS failed
FROM generate_series(
    date_trunc('hour', now()) - make_interval(hours => %(back)s), date_trunc('hour', now()), INTERVAL '1 hour'
) AS h(hour)
LEFT JOIN finished f ON f.hour = h.hour
GROUP BY h.hour
ORDER BY h.hour;
"""

TABLE_HEALTH_SQL = """
SELECT
    relname AS table_name,
    n_live_tup AS live_tuples,
    n_dead_tup AS dead_tuples,
    ROUND(100.0 * n_dead_tup / NULLIF(n_live_tup + n_dead_tup, 0), 1) AS dead_pct,
    last_autovacuum,
    last_vacuum,
    last_autoanalyze,
    pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables
WHERE relid IN ('workflows'::regclass, 'workflow_steps'::regclass)
ORDER BY relname;
"""

OLDEST_PENDING_SQL = """
SELECT id, workflow_type, queue, created_at, now() - created_at AS age
FROM workflows
WHERE status = 'pending'
ORDER BY created_at
LIMIT 1;
"""

# A loose index scan over idx_workflows_type_created: one index probe per
# distinct type instead of reading every row.
WORKFLOW_TYPES_SQL = """
WITH RECURSIVE types AS (
    (SELECT workflow_type FROM workflows ORDER BY workflow_type LIMIT 1)
    UNION ALL
    SELECT (SELECT w.workflow_type FROM workflows w WHERE w.workflow_type > types.workflow_type
            ORDER BY w.workflow_type LIMIT 1)
    FROM types
    WHERE types.workflow_type IS NOT NULL
)
SELECT workflow_type FROM types WHERE workflow_type IS NOT NULL;
"""


# The overview's outcomes per type: the seed's success rate counts a run still
# pending, running or paused (a wait for an approval, say) as a failure; here success is
# completed of the runs that completed or failed: a cancelled run was stopped by
# someone, not failed by its code, and is counted apart, as an unfinished one is.
OUTCOMES_SQL = """
SELECT
    workflow_type,
    COUNT(*) AS total,
    COUNT(*) FILTER (WHERE status IN ('pending', 'running', 'paused')) AS unfinished,
    COUNT(*) FILTER (WHERE status = 'completed') AS completed,
    COUNT(*) FILTER (WHERE status = 'failed') AS failed,
    COUNT(*) FILTER (WHERE status = 'cancelled') AS cancelled,
    ROUND(100.0 * COUNT(*) FILTER (WHERE status = 'completed')
          / NULLIF(COUNT(*) FILTER (WHERE status IN ('completed', 'failed')), 0), 1) AS success_pct
FROM workflows
WHERE created_at > now() - make_interval(hours => %(hours)s)
GROUP BY workflow_type
ORDER BY workflow_type;
"""

# The last failures, through idx_workflows_status (status, created_at).
RECENT_FAILURES_SQL = """
SELECT id, workflow_type, current_step, attempts, error_message, finished_at
FROM workflows
WHERE status = 'failed'
ORDER BY created_at DESC
LIMIT %(limit)s;
"""

# Each status counted up to a cap: an index-only range of idx_workflows_status
# per status, so a table of millions of completed rows costs as much as a small one.
STATUS_COUNTS_SQL = """
SELECT s.status, (SELECT COUNT(*) FROM (SELECT 1 FROM workflows w WHERE w.status = s.status LIMIT %(cap)s) c)
FROM unnest(%(statuses)s::text[]) AS s(status);
"""


@dataclasses.dataclass(frozen=True)
class HourlyOutcome:
    hour: datetime.datetime
    completed: int
    failed: int


def queue_depth(waiting: WaitingRuns | None = None) -> Report:
    """Unfinished workflows per queue: due now, waiting, due later, running, and
    the oldest due run's creation; ``estimated`` when the runs that wait were
    counted from a sample (``waiting``, else ``waiting_runs()``)."""
    exact = _run("Queue depth", QUEUE_DEPTH_SQL).as_dicts()
    waiting = waiting if waiting is not None else waiting_runs()
    later = waiting.by_queue()
    rows = []
    for queue in sorted({row["queue"] for row in exact} | set(later)):
        found = next((row for row in exact if row["queue"] == queue), {})
        waits, scheduled = later.get(queue, (0, 0))
        rows.append(
            (queue, found.get("due", 0), waits, scheduled, found.get("running", 0), found.get("oldest_due"),
             waiting.estimated)
        )  # fmt: skip
    columns = ["queue", "due", "waiting", "scheduled", "running", "oldest_due", "estimated"]
    return Report("Queue depth", columns, rows)


def waiting_counts() -> dict[str, int]:
    """Pending workflows that wait, by what for: ``{"timer": n, "event": n, "children": n, "worker": n}``,
    keyed by ``waits.WaitKind`` value (estimated past ``WAITING_EXACT``, see ``waiting_runs``).

    A wait that is over (its timer is due, or an event or a child woke it)
    counts as due in ``queue_depth``, not here.
    """
    return waiting_runs().by_kind()


def hourly_outcomes(hours: int = 24) -> list[HourlyOutcome]:
    """Workflows completed and failed in each of the last ``hours`` hours (the
    current one included), oldest first; of those created at most a day before
    the window (see ``HOURLY_OUTCOMES_SQL``)."""
    report = _run(f"Completed and failed per hour, last {hours} hours", HOURLY_OUTCOMES_SQL, {"back": hours - 1})
    return [HourlyOutcome(hour, completed, failed) for hour, completed, failed in report.rows]


def table_health() -> Report:
    """Live and dead tuples and the last (auto)vacuum of the two tables, from ``pg_stat_user_tables``."""
    return _run("Table health", TABLE_HEALTH_SQL)


def oldest_pending() -> dict[str, Any] | None:
    """The pending workflow created first, with its age, or None when nothing is pending."""
    rows = _run("Oldest pending workflow", OLDEST_PENDING_SQL).as_dicts()
    return rows[0] if rows else None


def outcomes(hours: int = 24) -> Report:
    """Runs started in the last ``hours`` per type: unfinished, completed, failed,
    cancelled, and the success rate of those that completed or failed."""
    return _run(f"Outcomes per workflow type, last {hours} hours", OUTCOMES_SQL, {"hours": hours})


def recent_failures(limit: int = 10) -> Report:
    """The failed workflows started last, with their errors."""
    return _run("Recent failures", RECENT_FAILURES_SQL, {"limit": limit})


def status_counts(statuses: list[str], cap: int) -> dict[str, int]:
    """How many workflows are in each of ``statuses``, counted up to ``cap`` each."""
    rows = _run("Workflows per status", STATUS_COUNTS_SQL, {"statuses": statuses, "cap": cap}).rows
    return {status: count for status, count in rows}


def has_index(name: str) -> bool:
    """Whether index ``name`` exists (an optional one, such as migration 0011's pg_trgm index)."""
    return bool(_run("Index", "SELECT to_regclass(%s) IS NOT NULL", [name]).rows[0][0])


def workflow_types() -> list[str]:
    """Every workflow type present in the table, in order."""
    return [row[0] for row in _run("Workflow types", WORKFLOW_TYPES_SQL).rows]

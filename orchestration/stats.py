"""The seed's three monitoring reports, shared by ``workflow_stats`` and the admin.

The queries are the seed's own text, run verbatim (the hours parameter replaces
its literal ``24`` only when asked for another window).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import connections

from .conf import conf

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


def _run(title: str, sql: str, params: list[Any] | None = None) -> Report:
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(sql, params)
        columns = [column.name for column in cursor.description]
        return Report(title, columns, list(cursor.fetchall()))


def success_rate(hours: int = 24) -> Report:
    sql = SUCCESS_RATE_SQL
    if hours != 24:
        sql = sql.replace("INTERVAL '24 hours'", "make_interval(hours => %s)")
    return _run(f"Success rate per workflow type, last {hours} hours", sql, [hours] if hours != 24 else None)


def stuck_workflows() -> Report:
    return _run("Running workflows with no heartbeat for 5 minutes (dead workers)", STUCK_SQL)


def step_durations() -> Report:
    return _run("Average duration of completed steps", STEP_DURATIONS_SQL)


def all_reports(hours: int = 24) -> list[Report]:
    return [success_rate(hours), stuck_workflows(), step_durations()]

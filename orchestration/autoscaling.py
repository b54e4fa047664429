"""The query an autoscaler reads: the runs due now, per queue.

A run is due when a worker would claim it at once: pending, and its
``run_after`` passed or unset (the claim's own condition). Runs of a paused
queue are left out: more workers would not start them. The query reads the
pending entries of an index only (the partial claim index, or the status
index searched on ``'pending'``, as the planner weighs them), never the
finished history, so its cost follows the pending runs, not the table
(docs/how-to/running-in-production.md, where it is a KEDA trigger, and
``orchestration_workflows_due`` for an HPA).
"""

from __future__ import annotations

from django.db import connections

from .conf import conf

#: Due runs per queue, queues of paused rows left out.
DUE_BY_QUEUE_SQL = """
SELECT queue, count(*) AS due
FROM workflows
WHERE status = 'pending'
  AND (run_after IS NULL OR run_after <= now())
  AND queue NOT IN (SELECT name FROM workflow_queues WHERE paused)
GROUP BY queue
ORDER BY queue
"""


def due_by_queue() -> dict[str, int]:
    """``{queue: runs due now}``, for the queues that have any."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(DUE_BY_QUEUE_SQL)
        return dict(cursor.fetchall())

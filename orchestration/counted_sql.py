"""The claim of a worker whose queues are limited in number running at once
only: ``COMPLETE_AND_CLAIM_COUNTED`` (written apart from ``sql``, whose size it
would push past its budget).

``sql.COMPLETE_AND_CLAIM_LIMITED`` serves every rule: per-key limits walk the
keys, rate limits log each claim and forget the old ones, and each CTE is paid
for whether a queue has such a rule or not. A queue that is paused or has a
``concurrency`` limit, and no other rule, needs none of that: its room, then
its runs up to it.

A claim that takes no more runs of each such queue than it completes there
(``HAND_OVER_COUNTED``) cannot raise the queue's running count, whatever the
claims beside it do: it hands over slots, and needs no turn on the queue's
lock (``functions``). A claim that may take more tries the lock, and hands
over that many if another claim holds it (when it completes runs), so the
claims of busy workers seldom wait for each other.
"""

from __future__ import annotations

from .sql import COMPLETIONS, LIMITED_ROWS, LIMITED_TAKEN, PENDING_QUEUES


def _counted(room_cap: str) -> str:
    """The counted claim, each limited queue's room also at most ``room_cap``
    (an SQL expression of the queue's ``s.name``; empty: no other cap)."""
    return (
        """
WITH RECURSIVE """
        + COMPLETIONS
        + "), "
        + PENDING_QUEUES
        + """), clock AS MATERIALIZED (
    SELECT statement_timestamp() AS now
), room AS MATERIALIZED (
    SELECT s.name, CASE WHEN q.paused THEN 0 WHEN q.concurrency IS NULL THEN {limit} ELSE GREATEST(0, LEAST({limit},
        %(limited_room)s::integer,
        q.concurrency - (SELECT count(*) FROM workflows AS w WHERE w.status = 'running' AND w.queue = s.name)
            + (SELECT count(*) FROM done WHERE done.queue = s.name)"""
        + room_cap
        + """)) END AS room
    FROM (SELECT unnest(%(queues)s::text[]) AS name
          UNION ALL SELECT name FROM pending_queue WHERE name IS NOT NULL) AS s
    LEFT JOIN workflow_queues AS q ON q.name = s.name
), claimed AS MATERIALIZED (
    SELECT c.id, c.started_at, c.priority, c.created_at FROM room AS r CROSS JOIN LATERAL (
        SELECT w.* FROM (VALUES (true), (false)) AS kind (keyless), LATERAL (  -- without a key; with one
            SELECT w.id, w.started_at, w.priority, w.created_at
            FROM workflows AS w
            WHERE w.status = 'pending' AND w.queue = r.name AND (w.concurrency_key IS NULL) = kind.keyless
              AND (w.run_after IS NULL OR w.run_after <= statement_timestamp())
            ORDER BY -w.priority::bigint, w.created_at LIMIT r.room
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS w
        ORDER BY w.priority DESC, w.created_at LIMIT r.room
    ) AS c
    WHERE r.room > 0
    ORDER BY c.priority DESC, c.created_at LIMIT {limit}
), """
        + LIMITED_TAKEN
        + """)
"""
        + LIMITED_ROWS
    )


#: ``sql.COMPLETE_AND_CLAIM_LIMITED`` (same parameters, same rows back, after
#: the same ``sql.LOCK_QUEUES``) for workers none of whose queues has a per-key
#: or a rate limit: per served queue, its ``room`` (0 when paused; else the
#: least of ``{limit}``, ``%(limited_room)s`` and ``concurrency`` less its running
#: runs, those completed here given back), then its runs in claim order up to it, those
#: without a key and those with one each from ``idx_workflows_queue_claim``.
COMPLETE_AND_CLAIM_COUNTED = _counted("")
#: ``COMPLETE_AND_CLAIM_COUNTED`` without the lock: each limited queue's room is
#: also at most the runs of it completed here. Its count of running runs, which
#: no lock makes current, only stops a hand-over while the queue runs more than
#: its limit (the limit was lowered).
HAND_OVER_COUNTED = _counted(",\n        (SELECT count(*) FROM done WHERE done.queue = s.name)")

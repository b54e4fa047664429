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

A queue far from its limit needs no turn at all: a claim of a few runs takes
one of its lanes instead (``TAKE_LANE``), counts its running runs once the
lane is held (``FREE_IN_LANE``), and claims as for an unlimited queue,
beside the claims in its other lanes.
"""

from __future__ import annotations

from . import sql
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

#: A claim far from its queue's limit takes one of its ``sql.QUEUE_LANES``
#: lanes and not its turn (``functions``): it claims at most this many runs, so
#: that a count made once its lane is held, with ``sql.QUEUE_LANES`` times as
#: many slots free, keeps every claim in a lane within the limit.
LANE_CLAIM = 64
#: The free slots a claim in a lane keeps beside the claims in the other lanes.
LANE_MARGIN = sql.QUEUE_LANES * LANE_CLAIM
#: A queue ``q`` whose only rule is a concurrency limit, and ``q``'s running runs.
_LANE_RULES = "NOT q.paused AND q.key_concurrency IS NULL AND q.rate_limit IS NULL AND q.key_rate_limit IS NULL"
_RUNNING = "(SELECT count(*) FROM workflows AS w WHERE w.status = 'running' AND w.queue = q.name)"

#: The queue of a claim in a lane, and its free slots, counted in the
#: statement's snapshot: the one restricted queue the claim serves
#: (``%(queues)s``, NULL: every queue), if it is the only one, is not paused
#: and has a concurrency limit and no other limit; else no row. ``OFFSET 0``
#: keeps a filter on ``lane`` out of the aggregate, where it would count again.
_LANE = f"""SELECT lane.name, (SELECT q.concurrency - {_RUNNING} FROM workflow_queues AS q WHERE q.name = lane.name) AS free
FROM (SELECT CASE WHEN count(*) = 1 AND bool_and({_LANE_RULES}) THEN min(q.name) END AS name
      FROM workflow_queues AS q
      WHERE {sql.SERVED_QUEUES} AND (paused OR {sql.HAS_LIMIT})
      OFFSET 0) AS lane
WHERE lane.name IS NOT NULL"""

#: ``_LANE``'s queue, if it has ``LANE_MARGIN`` slots free, once one of its
#: lanes is held: the first free from this backend's own. NULL, holding none,
#: when no queue is far from its limit or every lane is taken (by claims in
#: lanes, or by one in its turn: ``sql.LOCK_QUEUES`` takes them all). The
#: count only keeps claims near the limit out of the lanes; ``FREE_IN_LANE``
#: is the one the limit needs.
TAKE_LANE = f"""
SELECT far.name FROM ({_LANE}
OFFSET 0) AS far
WHERE far.free >= {LANE_MARGIN} AND EXISTS (
    SELECT FROM generate_series(0, {sql.QUEUE_LANES - 1}) AS lane
    WHERE pg_try_advisory_xact_lock(%(space)s + 1 + (pg_backend_pid() + lane) % {sql.QUEUE_LANES}, hashtext(far.name))
)
"""
#: The slots of lane queue ``%(lane_queue)s`` free, counted once its lane is
#: held, if it is still ``_LANE``'s queue; else NULL. A claim in the lane
#: takes runs only if they are at least ``LANE_MARGIN``.
FREE_IN_LANE = f"SELECT lane.free FROM ({_LANE}) AS lane WHERE lane.name = %(lane_queue)s"

"""The SQL of every variant of the claim, and of the fenced write: the
statements the ORM cannot say, each written out whole and named (the table
of when each runs is in the package's docstring).

The worker runs them as PL/pgSQL functions (``functions``), which carry
``INDEX_PLANS_ONLY`` in their ``SET`` clauses; the texts here are what those
functions are made of, and what the plan tests and the benchmark
``EXPLAIN``. Every write but the claim is fenced: it changes the workflow
row if, and only if, this lease still holds it, and locks it for the rest of
the transaction, so a concurrent cancel or reclaim either commits first
(nothing is written) or waits for it. Which status each statement may write
is declared in ``transitions.MOVES``.
"""

from __future__ import annotations

import functools
from typing import Any

#: First key of the transaction-level advisory locks that serialise the claims of a limited queue.
QUEUE_LOCK_SPACE = 0x716C696D  # "qlim"
#: The lanes of a limited queue, each a lock of the keys after it: the claims far
#: from the queue's limit take one and not its turn (``TAKE_LANE``).
QUEUE_LANES = 4

#: The completions of ``COMPLETE_AND_CLAIM(_LIMITED)``: CTEs ``done`` (the runs
#: completed) and ``checkpoint`` (their last steps' checkpoints).
COMPLETIONS = """done AS (
    UPDATE workflows AS w
    SET status = 'completed', output_data = d.output, finished_at = statement_timestamp(),
        updated_at = statement_timestamp(), lease_token = NULL, error_message = NULL, error_traceback = NULL,
        current_step = COALESCE(d.step, w.current_step),
        worker_deaths = CASE WHEN d.step IS NULL THEN w.worker_deaths ELSE 0 END,
        lost_at_step = CASE WHEN d.step IS NULL THEN w.lost_at_step END
    FROM ROWS FROM (unnest(%(ids)s::uuid[]), unnest(%(leases)s::uuid[]), jsonb_array_elements(%(outputs)s::jsonb),
                    unnest(%(steps)s::integer[]), jsonb_array_elements_text(%(step_names)s::jsonb),
                    jsonb_array_elements(%(step_outputs)s::jsonb), unnest(%(ages)s::float8[]))
         AS d (id, lease, output, step, step_name, step_output, age)
    WHERE w.id = ANY(%(ids)s::uuid[]) AND w.id = d.id AND w.lease_token = d.lease
      AND w.status IS NOT DISTINCT FROM 'running'
    RETURNING w.id, w.queue, w.concurrency_key, d.step, d.step_name, d.step_output, d.age
), checkpoint AS (
    UPDATE workflow_steps
    SET status = 'completed', output_data = done.step_output, error_message = NULL, step_name = done.step_name,
        completed_at = statement_timestamp() - make_interval(secs => done.age)
    FROM done
    WHERE workflow_steps.workflow_id = ANY(ARRAY(SELECT id FROM done))  -- an index lookup, whatever the join order
      AND workflow_steps.workflow_id = done.id AND workflow_steps.step_number = done.step
"""


#: Before a limit-aware claim, in its function (``functions``): up to
#: ``{limit}`` pending runs of ``%(queues)s`` whose ``run_after`` has passed (a
#: timer's end, a delayed start, a backoff), the earliest first, made due:
#: ``run_after`` NULL. The limit-aware claims read due runs only (``run_after IS
#: NULL``), from indexes that hold nothing else (``idx_workflows_queue_due``,
#: ``idx_workflows_key_due``), so the runs that wait, however many, are never
#: read by a claim; this finds those whose wait has passed by
#: ``idx_workflows_waiting``, in one probe when none has. Its own statement: the
#: claim after it, in a snapshot of its own, takes the runs it made due. Rows
#: another transaction holds are left to the next claim.
MAKE_DUE = """
UPDATE workflows SET run_after = NULL
WHERE id = ANY(ARRAY(
    SELECT id FROM workflows
    WHERE status = 'pending' AND run_after <= statement_timestamp()
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    ORDER BY run_after
    LIMIT {limit}
    FOR NO KEY UPDATE SKIP LOCKED
))
"""

#: CTE ``taken``, which marks CTE ``claimed``'s runs running (first started at
#: ``{first_started}``) and returns them (with ``{also_returning}``), and CTE
#: ``placeholder``, which records a fresh run's step 1; without the closing
#: parenthesis. A run is ``fresh`` when never claimed (``claimed.started_at`` is
#: the locked row's) and no step is recorded. Filled in by ``str.format``.
_TAKEN = """taken AS (
    UPDATE workflows AS w
    SET status = 'running', lease_token = gen_random_uuid(), attempts = w.attempts + 1, worker_id = %(worker)s,
        started_at = COALESCE(w.started_at, {first_started}), updated_at = statement_timestamp(),
        run_after = NULL, waiting_for = NULL
    FROM claimed
    WHERE w.id = claimed.id AND w.id = ANY(ARRAY(SELECT id FROM claimed))  -- whatever the join order
    RETURNING w.id, w.workflow_type, w.input_data, w.lease_token, w.attempts, w.max_retries, w.queue, w.parent_id,
        w.deadline,
        claimed.started_at IS NULL AND (SELECT 1 FROM workflow_steps AS s WHERE s.workflow_id = w.id LIMIT 1) IS NULL
            AS fresh{also_returning}
), placeholder AS (
    INSERT INTO workflow_steps (workflow_id, step_number, status, started_at, attempts)
    SELECT id, 1, 'running', statement_timestamp(), 1 FROM taken WHERE fresh
    ON CONFLICT (workflow_id, step_number) DO NOTHING
"""


#: Complete the runs given as arrays (each fenced by its own lease, with its
#: deferred checkpoint; a NULL step: none), then claim up to ``{limit}`` due
#: workflows of ``%(queues)s`` (NULL: every queue) for ``%(worker)s``. Empty
#: arrays complete nothing; a limit of 0 claims nothing. The workers run it
#: as ``CLAIM``; ``complete_and_claim(limit)`` writes the limit into the text,
#: for ``EXPLAIN``.
#:
#: Returns the claimed rows, each with the array of the ids completed (a run
#: missing from it had lost its lease), or one row of NULLs with it when
#: nothing was claimed. The last column before it says the run is ``fresh``:
#: never claimed (``claimed.started_at`` is the locked row's) and no step
#: recorded; a fresh run's step 1 is recorded running here, before any of its
#: code runs, and named with its checkpoint (``lease.Lease.placeholder``).
#:
#: Due runs are read from two index ranges, each up to ``{limit}`` runs: those
#: with no ``run_after`` from ``idx_workflows_due``, in claim order, and those
#: whose ``run_after`` has passed from ``idx_workflows_waiting``, the earliest
#: first; the claim takes the first ``{limit}`` of both in claim order (the rows
#: it locked and leaves are free again at its commit). No run that still waits
#: is read, however many wait.
#:
#: Planner: ``'pending'`` is written, not bound, so the generic plan can use ``idx_workflows_due``.
#: Planner: a bound limit is planned as a tenth of the table; under ``INDEX_PLANS_ONLY`` that changes no scan.
#: Planner: "no step row" is a scalar subquery, not NOT EXISTS, which a large claim hashes over every step.
#: Locks: the completions come in id order, so two batches lock their rows in one order.
COMPLETE_AND_CLAIM = (
    """
WITH """
    + COMPLETIONS
    + """), claimed AS MATERIALIZED (
    SELECT id, started_at FROM (
        SELECT * FROM (
            SELECT id, started_at, priority, created_at FROM workflows
            WHERE status = 'pending' AND run_after IS NULL
              AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
            ORDER BY priority DESC, created_at
            LIMIT {limit}
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS due
        UNION ALL
        SELECT * FROM (
            SELECT id, started_at, priority, created_at FROM workflows
            WHERE status = 'pending' AND run_after <= statement_timestamp()
              AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
            ORDER BY run_after
            LIMIT {limit}
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS passed
    ) AS c
    ORDER BY priority DESC, created_at
    LIMIT {limit}
), """
    + _TAKEN.format(first_started="statement_timestamp()", also_returning="")
    + """)
SELECT taken.*, completed.ids FROM (SELECT array_agg(id) AS ids FROM done) AS completed LEFT JOIN taken ON true
"""
)


@functools.lru_cache(maxsize=64)
def complete_and_claim(limit: int) -> str:
    """``COMPLETE_AND_CLAIM`` with ``limit`` written in, as the plan tests and the benchmark ``EXPLAIN`` it."""
    return COMPLETE_AND_CLAIM.replace("{limit}", str(int(limit)))


#: ``COMPLETE_AND_CLAIM`` as the worker runs it: the body of function
#: ``orchestration_complete_and_claim`` (see ``functions``), whose ``SET``
#: clauses carry ``INDEX_PLANS_ONLY``, so that it is one statement without a
#: pipeline. Its limit is bound (``%(limit)s``); under those settings the
#: generic plan is the written limit's.
CLAIM = (
    "SELECT * FROM orchestration_complete_and_claim(%(ids)s, %(leases)s, %(outputs)s, %(steps)s, %(step_names)s, "
    "%(step_outputs)s, %(ages)s, %(worker)s, %(queues)s, %(limit)s::integer)"
)


#: Of ``workflow_queues``' rows: the queues served (``%(queues)s``, NULL: every queue) ...
SERVED_QUEUES = "(%(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[]))"
#: ... and those with a limit.
HAS_LIMIT = """(concurrency IS NOT NULL OR key_concurrency IS NOT NULL
       OR rate_limit IS NOT NULL OR key_rate_limit IS NOT NULL)"""
#: The queues served that have a limit.
_LIMITED_QUEUES = f"{SERVED_QUEUES}\n  AND {HAS_LIMIT}"
#: Before a limit-aware claim, in its function (see ``functions``): the advisory
#: locks of each limited queue served (no write, no WAL), in one order: its
#: turn, then its ``QUEUE_LANES`` lanes (``TAKE_LANE``). The claims
#: of a queue take turns, each counting in a snapshot taken once those before it
#: committed (a count in the statement that waited would not see them).
LOCK_QUEUES = f"""
SELECT pg_advisory_xact_lock(%(space)s + lane, hashtext(name))
FROM workflow_queues, generate_series(0, {QUEUE_LANES}) AS lane
WHERE {_LIMITED_QUEUES}
ORDER BY hashtext(name), lane
"""
#: ``LOCK_QUEUES``'s locks, those free taken without waiting: whether all were (NULL: none to take).
TRY_LOCK_QUEUES = f"""
SELECT bool_and(pg_try_advisory_xact_lock(%(space)s + lane, hashtext(name)))
FROM workflow_queues, generate_series(0, {QUEUE_LANES}) AS lane
WHERE {_LIMITED_QUEUES}
"""


def _pending_queues(due: str) -> str:
    return f"""pending_queue (name) AS (
    SELECT (SELECT queue FROM workflows WHERE status = 'pending'{due} AND %(queues)s::text[] IS NULL
            ORDER BY queue, concurrency_key IS NULL, -priority::bigint, created_at LIMIT 1)
    UNION ALL
    SELECT (SELECT w.queue FROM workflows AS w WHERE w.status = 'pending'{due.replace(" run", " w.run")}
                                                   AND w.queue > p.name
            ORDER BY w.queue, w.concurrency_key IS NULL, -w.priority::bigint, w.created_at LIMIT 1)
    FROM pending_queue AS p WHERE p.name IS NOT NULL
"""


#: CTE ``pending_queue``: with ``%(queues)s`` NULL (every queue), the queues
#: with pending runs, one index probe each (and a last NULL).
#:
#: Planner: each probe is ``ORDER BY queue LIMIT 1``, not ``min(queue)``: the
#: planner may answer a ``min()`` by reading a whole index that does not lead
#: with the queue (an aggregate needs no sort) and, with statistics that say
#: the table is empty (analysed while it held dead rows only), it did: every
#: due run of ``idx_workflows_due`` at every claim. An order needs a sort there,
#: which ``INDEX_PLANS_ONLY`` prices out, so only an index that leads with the
#: queue can serve it.
PENDING_QUEUES = _pending_queues("")
#: ``PENDING_QUEUES`` of the limit-aware claims: the queues with due runs, each
#: a probe of ``idx_workflows_queue_due``, which holds no run that waits.
DUE_QUEUES = _pending_queues(" AND run_after IS NULL")

#: The end of the limit-aware claims (``COMPLETE_AND_CLAIM_LIMITED``,
#: ``COMPLETE_AND_CLAIM_COUNTED``): CTE ``taken`` marks CTE
#: ``claimed``'s runs running (first started at CTE ``clock``), ``placeholder``
#: records a fresh run's step 1; ``LIMITED_ROWS`` returns them in claim order.
LIMITED_TAKEN = _TAKEN.format(
    first_started="(SELECT now FROM clock)", also_returning=",\n        w.priority, w.created_at"
)
LIMITED_ROWS = """SELECT t.id, t.workflow_type, t.input_data, t.lease_token, t.attempts, t.max_retries, t.queue,
    t.parent_id, t.deadline, t.fresh, completed.ids
FROM (SELECT array_agg(id) AS ids FROM done) AS completed LEFT JOIN taken AS t ON true
ORDER BY t.priority DESC, t.created_at
"""

#: ``COMPLETE_AND_CLAIM`` for workers that serve a paused or limited queue (its
#: parameters and ``%(limited_room)s``, the same rows back): per served queue, its
#: ``room`` (0 when paused; else the least of ``{limit}``, with a concurrency limit
#: ``%(limited_room)s`` (the process's share left, see ``worker.dispatch``) and
#: ``concurrency`` less its running runs, those completed here given back, and
#: ``rate_limit``'s N less its claims of the last period), then its runs in
#: claim order up to it. A queue with per-key limits takes its runs key by key
#: (``turn``), starting after the last key served (``key_cursor``): each key as
#: many as its own room, a saturated key none, so
#: it holds no other key back and its backlog is never read. Each claim of a
#: rate-limited queue is logged in ``workflow_queue_starts`` at ``clock``, a
#: clock read after the lock (``LOCK_QUEUES``); the log keeps one period.
#:
#: Planner: every lookup is an index probe: queues and keys by ``min()`` over
#: ``idx_workflows_queue_due`` / ``idx_workflows_key_due``, runs ordered by
#: ``-priority::bigint`` so that only those indexes give the order (docs/performance.md).
#: Planner: runs completed here are counted from ``done``'s columns (joined back: every run of the queue read).
COMPLETE_AND_CLAIM_LIMITED = (
    """
WITH RECURSIVE """
    + COMPLETIONS
    + "), "
    + DUE_QUEUES
    + """), clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now
), rules AS MATERIALIZED (
    SELECT s.name, COALESCE(q.paused, false) AS paused, q.concurrency, q.key_concurrency,
        COALESCE(q.key_cursor, '') AS key_cursor,
        split_part(q.rate_limit, '/', 1)::integer AS rate, split_part(q.key_rate_limit, '/', 1)::integer AS key_rate,
        make_interval(secs => CASE right(q.rate_limit, 1) WHEN 's' THEN 1 WHEN 'm' THEN 60 WHEN 'h' THEN 3600 END)
            AS rate_period,
        make_interval(secs => CASE right(q.key_rate_limit, 1) WHEN 's' THEN 1 WHEN 'm' THEN 60 WHEN 'h' THEN 3600 END)
            AS key_rate_period
    FROM (SELECT unnest(%(queues)s::text[]) AS name
          UNION ALL SELECT name FROM pending_queue WHERE name IS NOT NULL) AS s
    LEFT JOIN workflow_queues AS q ON q.name = s.name
), room AS MATERIALIZED (
    SELECT r.*, r.key_concurrency IS NOT NULL OR r.key_rate IS NOT NULL AS by_key,
        CASE WHEN r.paused THEN 0 ELSE GREATEST(0, LEAST({limit},
            CASE WHEN r.concurrency IS NOT NULL THEN %(limited_room)s::integer END,
            CASE WHEN r.concurrency IS NOT NULL THEN r.concurrency
                - (SELECT count(*) FROM workflows AS w WHERE w.status = 'running' AND w.queue = r.name)
                + (SELECT count(*) FROM done WHERE done.queue = r.name) END,
            CASE WHEN r.rate IS NOT NULL THEN r.rate - (SELECT count(*) FROM workflow_queue_starts AS s, clock
                WHERE s.queue = r.name AND s.started_at > clock.now - r.rate_period) END)) END AS room
    FROM rules AS r
), candidate AS MATERIALIZED (
    SELECT c.* FROM room AS r CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT w.* FROM (VALUES (true), (false)) AS kind (keyless), LATERAL (  -- without a key; with one
                SELECT w.id, w.started_at, w.queue, w.concurrency_key, w.priority, w.created_at, 0 AS lap
                FROM workflows AS w
                WHERE (kind.keyless OR NOT r.by_key) AND w.status = 'pending' AND w.queue = r.name
                  AND (w.concurrency_key IS NULL) = kind.keyless
                  AND w.run_after IS NULL
                ORDER BY -w.priority::bigint, w.created_at LIMIT r.room
                FOR NO KEY UPDATE SKIP LOCKED
            ) AS w
            UNION ALL
            SELECT * FROM (
                WITH RECURSIVE turn (key, lap) AS (
                    SELECT r.key_cursor, -1 WHERE r.by_key  -- where the last turn ended; not a key to serve
                    UNION ALL
                    SELECT next.key, next.lap FROM turn, LATERAL (
                        SELECT (SELECT min(w.concurrency_key) FROM workflows AS w
                                WHERE w.status = 'pending' AND w.run_after IS NULL AND w.queue = r.name
                                  AND w.concurrency_key IS NOT NULL
                                  AND w.concurrency_key > turn.key) AS key
                    ) AS after, LATERAL (  -- past the last key, once: from the first, up to the cursor
                        SELECT COALESCE(after.key, CASE WHEN turn.lap < 1 THEN (
                            SELECT min(w.concurrency_key) FROM workflows AS w
                            WHERE w.status = 'pending' AND w.run_after IS NULL AND w.queue = r.name
                              AND w.concurrency_key IS NOT NULL
                        ) END) AS key,
                            GREATEST(turn.lap, 0) + (after.key IS NULL)::integer AS lap
                    ) AS next
                    WHERE next.key IS NOT NULL AND NOT (next.lap = 1 AND next.key > r.key_cursor)
                )
                SELECT h.* FROM (SELECT * FROM turn WHERE lap >= 0) AS turn CROSS JOIN LATERAL (
                    SELECT GREATEST(0, LEAST(r.room,
                        CASE WHEN r.key_concurrency IS NOT NULL THEN r.key_concurrency
                            - (SELECT count(*) FROM workflows AS w
                               WHERE w.status = 'running' AND w.queue = r.name AND w.concurrency_key = turn.key)
                            + (SELECT count(*) FROM done WHERE done.queue = r.name AND done.concurrency_key = turn.key)
                        END,
                        CASE WHEN r.key_rate IS NOT NULL THEN r.key_rate - (
                            SELECT count(*) FROM workflow_queue_starts AS s, clock
                            WHERE s.queue = r.name AND s.concurrency_key = turn.key
                              AND s.started_at > clock.now - r.key_rate_period) END)) AS room
                ) AS k CROSS JOIN LATERAL (
                    SELECT w.id, w.started_at, w.queue, w.concurrency_key, w.priority, w.created_at, turn.lap
                    FROM workflows AS w
                    WHERE w.status = 'pending' AND w.queue = r.name AND w.concurrency_key = turn.key
                      AND w.run_after IS NULL
                    ORDER BY -w.priority::bigint, w.created_at LIMIT k.room
                    FOR NO KEY UPDATE SKIP LOCKED
                ) AS h
                LIMIT r.room
            ) AS by_key
        ) AS runs
        ORDER BY runs.priority DESC, runs.created_at LIMIT r.room
    ) AS c
    WHERE r.room > 0
), claimed AS MATERIALIZED (
    SELECT id, started_at, queue, concurrency_key, lap FROM candidate ORDER BY priority DESC, created_at LIMIT {limit}
), """
    + LIMITED_TAKEN
    + """), logged AS (
    INSERT INTO workflow_queue_starts (queue, concurrency_key, started_at)
    SELECT c.queue, c.concurrency_key, clock.now FROM claimed AS c, clock, room AS r
    WHERE r.name = c.queue AND (r.rate IS NOT NULL OR r.key_rate IS NOT NULL)
), forgotten AS (
    DELETE FROM workflow_queue_starts AS s USING room AS r, clock
    WHERE s.queue = r.name AND (r.rate IS NOT NULL OR r.key_rate IS NOT NULL)
      AND s.started_at <= clock.now - GREATEST(r.rate_period, r.key_rate_period)
), turned AS (
    UPDATE workflow_queues AS q SET key_cursor = last.key
    FROM (SELECT DISTINCT ON (c.queue) c.queue, c.concurrency_key AS key FROM claimed AS c
          WHERE c.concurrency_key IS NOT NULL ORDER BY c.queue, c.lap DESC, c.concurrency_key DESC) AS last, room AS r
    WHERE q.name = last.queue AND r.name = last.queue AND r.by_key
)
"""
    + LIMITED_ROWS
)


#: The limit-aware claims as the worker runs them, with their lock: functions
#: (see ``functions``), by whether a served queue has a per-key or a rate limit.
LIMIT_AWARE_CLAIMS = {
    keys_or_rates: CLAIM.replace(
        "orchestration_complete_and_claim(", f"orchestration_complete_and_claim_{kind}("
    ).replace("%(limit)s::integer)", "%(limit)s::integer, %(limited_room)s::integer)")
    for keys_or_rates, kind in ((False, "counted"), (True, "limited"))
}


# -- the counted claim: a queue paused or limited in number running at once only --------
#
# ``COMPLETE_AND_CLAIM_LIMITED`` serves every rule: per-key limits walk the
# keys, rate limits log each claim and forget the old ones, and each CTE is
# paid for whether a queue has such a rule or not. A queue that is paused or
# has a ``concurrency`` limit, and no other rule, needs none of that: its
# room, then its runs up to it.


def _counted(room_cap: str) -> str:
    """The counted claim, each limited queue's room also at most ``room_cap``
    (an SQL expression of the queue's ``s.name``; empty: no other cap)."""
    return (
        """
WITH RECURSIVE """
        + COMPLETIONS
        + "), "
        + DUE_QUEUES
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
              AND w.run_after IS NULL
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


#: ``COMPLETE_AND_CLAIM_LIMITED`` (same parameters, same rows back, after
#: the same ``LOCK_QUEUES``) for workers none of whose queues has a per-key
#: or a rate limit: per served queue, its ``room`` (0 when paused; else the
#: least of ``{limit}``, ``%(limited_room)s`` and ``concurrency`` less its running
#: runs, those completed here given back), then its runs in claim order up to it, those
#: without a key and those with one each from ``idx_workflows_queue_due``.
COMPLETE_AND_CLAIM_COUNTED = _counted("")
#: ``COMPLETE_AND_CLAIM_COUNTED`` without the lock: each limited queue's room is
#: also at most the runs of it completed here. Its count of running runs, which
#: no lock makes current, only stops a hand-over while the queue runs more than
#: its limit (the limit was lowered).
HAND_OVER_COUNTED = _counted(",\n        (SELECT count(*) FROM done WHERE done.queue = s.name)")

#: A claim far from its queue's limit takes one of its ``QUEUE_LANES``
#: lanes and not its turn (``functions``): it claims at most this many runs, so
#: that a count made once its lane is held, with ``QUEUE_LANES`` times as
#: many slots free, keeps every claim in a lane within the limit.
LANE_CLAIM = 64
#: The free slots a claim in a lane keeps beside the claims in the other lanes.
LANE_MARGIN = QUEUE_LANES * LANE_CLAIM
#: A queue ``q`` whose only rule is a concurrency limit, and ``q``'s running runs.
_LANE_RULES = "NOT q.paused AND q.key_concurrency IS NULL AND q.rate_limit IS NULL AND q.key_rate_limit IS NULL"
_RUNNING = "(SELECT count(*) FROM workflows AS w WHERE w.status = 'running' AND w.queue = q.name)"

#: The queue of a claim in a lane, and its free slots, counted in the
#: statement's snapshot: the one restricted queue the claim serves
#: (``%(queues)s``, NULL: every queue), if it is the only one, is not paused
#: and has a concurrency limit and no other limit; else no row. ``OFFSET 0``
#: keeps a filter on ``lane`` out of the aggregate, where it would count again.
_LANE = f"""SELECT lane.name,
    (SELECT q.concurrency - {_RUNNING} FROM workflow_queues AS q WHERE q.name = lane.name) AS free
FROM (SELECT CASE WHEN count(*) = 1 AND bool_and({_LANE_RULES}) THEN min(q.name) END AS name
      FROM workflow_queues AS q
      WHERE {SERVED_QUEUES} AND (paused OR {HAS_LIMIT})
      OFFSET 0) AS lane
WHERE lane.name IS NOT NULL"""

#: ``_LANE``'s queue, if it has ``LANE_MARGIN`` slots free, once one of its
#: lanes is held: the first free from this backend's own. NULL, holding none,
#: when no queue is far from its limit or every lane is taken (by claims in
#: lanes, or by one in its turn: ``LOCK_QUEUES`` takes them all). The
#: count only keeps claims near the limit out of the lanes; ``FREE_IN_LANE``
#: is the one the limit needs.
TAKE_LANE = f"""
SELECT far.name FROM ({_LANE}
OFFSET 0) AS far
WHERE far.free >= {LANE_MARGIN} AND EXISTS (
    SELECT FROM generate_series(0, {QUEUE_LANES - 1}) AS lane
    WHERE pg_try_advisory_xact_lock(%(space)s + 1 + (pg_backend_pid() + lane) % {QUEUE_LANES}, hashtext(far.name))
)
"""
#: The slots of lane queue ``%(lane_queue)s`` free, counted once its lane is
#: held, if it is still ``_LANE``'s queue; else NULL. A claim in the lane
#: takes runs only if they are at least ``LANE_MARGIN``.
FREE_IN_LANE = f"SELECT lane.free FROM ({_LANE}) AS lane WHERE lane.name = %(lane_queue)s"


#: The fenced write (``orchestration_fenced_write``, see ``functions``): nothing
#: unless lease ``%(lease)s`` still holds workflow ``%(id)s``; then the deferred
#: checkpoint (a step ``%(checkpoint_step)s`` that is not NULL) and, with a
#: step ``%(step)s`` that is not NULL, that step recorded running. Returns 1
#: if the lease held, else 0. A function, so that its planner settings ride in
#: its ``SET`` clauses instead of a pipeline of two statements.
FENCED_WRITE = (
    "SELECT orchestration_fenced_write(%(id)s, %(lease)s, %(checkpoint_step)s::integer, %(checkpoint_name)s, "
    "%(checkpoint_output)s::jsonb, %(checkpoint_age)s::float8, %(step)s::integer, %(name)s)"
)

#: Runs' progress (``ctx.set_progress``; ``lease.Lease.write_progress`` one,
#: ``batches.write_progresses`` the finished runs of a claim's batch), each fenced
#: by its own lease, in id order (as the completions lock them); returns the ids
#: written (one missing: its lease is gone). A run paused while it runs is still
#: its worker's until the step boundary gives it back (``Lease.give_back_paused``):
#: its reports are written meanwhile, so that a report is no step boundary (the
#: pause would cut the step short). With ``%(unflushed)s``, the commit
#: does not wait for the WAL's flush (``synchronous_commit`` off for this
#: transaction only): a report is advisory, and the run's next write that
#: waits (its checkpoint, its end) flushes it too, WAL being flushed in order.
#: Never set inside a caller's transaction, whose commit it would change too.
PROGRESS_WRITE = """
WITH commit AS (SELECT CASE WHEN %(unflushed)s THEN set_config('synchronous_commit', 'off', true) END)
UPDATE workflows AS w SET progress = d.progress
FROM commit, ROWS FROM (unnest(%(ids)s::uuid[]), unnest(%(leases)s::uuid[]), jsonb_array_elements(%(progress)s::jsonb))
     AS d (id, lease, progress)
WHERE w.id = ANY(%(ids)s::uuid[]) AND w.id = d.id AND w.lease_token = d.lease
  AND w.status IN ('running', 'paused')
RETURNING w.id
"""

#: ``FENCED_WRITE``'s parameters for "no deferred checkpoint".
NO_CHECKPOINT: dict[str, Any] = {
    "checkpoint_step": None,
    "checkpoint_name": None,
    "checkpoint_output": None,
    "checkpoint_age": None,
}


#: The hot statements' planner settings: the ``SET`` clauses of their
#: functions (``functions``); the plan tests and ``EXPLAIN`` run them first, in
#: the transaction that plans the statement (``true``: for that transaction
#: only, so also behind PgBouncer in transaction mode). A queue table's
#: statistics are stale as a rule (analysed while its runs were finished or
#: few, then filled faster than autovacuum re-analyses it), and each setting
#: prices out a plan that the planner picks from such statistics, as a plan
#: test shows with it left out:
#:
#: - ``enable_seqscan``: a sequential scan of the runs, where a claim per key
#:   must read one key's index entries only
#:   (``test_claim_plan__a_saturated_key_with_100000_pending__is_never_read``);
#: - ``enable_bitmapscan``, ``enable_hashjoin``: the completions found by a
#:   bitmap scan and hash-joined, with a table of finished runs analysed,
#:   rather than one index lookup a run (``test_index_plans_only__...``);
#: - ``enable_mergejoin``: merge joins over sorts in the limit-aware claims
#:   (the same test);
#: - ``enable_sort``: the runs whose wait has passed read from an index of
#:   every pending run (``idx_workflows_queue_claim``), each one's heap row
#:   fetched, and sorted by ``run_after``, rather than the range of
#:   ``idx_workflows_waiting`` in that order: with the table analysed while
#:   nothing was pending, both look free, and a million timers ending at once
#:   were each claim's to read (``test_claim_plan__plain__reads_the_runs_whose_wait_passed_in_order__...``);
#:   the sorts no plan avoids cost the same in every plan;
#: - ``jit``: JIT compiles a statement by its estimated cost, and a claim
#:   priced with a disabled shape in it (a sort every plan needs, say) passes
#:   ``jit_above_cost``: compiling the plain claim took 4.2 s a call;
#: - ``plan_cache_mode = force_generic_plan``: the plan of the function's
#:   first call kept for the connection's life, rather than one planned at
#:   every call (most of a claim's backend CPU, docs/performance.md), so the
#:   generic plans the plan tests check are those the workers run.
INDEX_PLANS_ONLY = (
    "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), "
    "set_config('enable_sort', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true), "
    "set_config('jit', 'off', true)"
)

#: The limit-aware claims' settings: ``INDEX_PLANS_ONLY``'s (JIT is off for every claim).
INDEX_PLANS_ONLY_NO_JIT = INDEX_PLANS_ONLY

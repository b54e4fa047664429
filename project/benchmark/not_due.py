"""The benchmark's runs that are not due yet: a table of them to drain behind
(``--not-due``), and a million timers coming due at once (``--wake``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .figures import Figure

if TYPE_CHECKING:
    from .scratch import ScratchDatabase

#: ``%s`` runs of type ``%s`` that wait, an hour older than any run the
#: benchmark starts, as the engine writes each kind of wait in turn: a timer
#: (``ctx.sleep``) of 14 days, an event without a time limit, a delayed start,
#: a retry's backoff, a parent waiting for its children.
LOAD_WAITING = """
INSERT INTO workflows (workflow_type, input_data, created_at, run_after, waiting_for, error_message, attempts)
SELECT %(type)s, '{"steps": 1}', now() - interval '1 hour' + g * interval '1 ms',
       CASE g %% 5 WHEN 0 THEN now() + interval '14 days' WHEN 2 THEN now() + interval '1 hour'
                   WHEN 3 THEN now() + interval '10 minutes' ELSE '9999-01-01'::timestamptz END,
       CASE g %% 5 WHEN 0 THEN 'timer: trial' WHEN 1 THEN 'event: approved'
                   WHEN 4 THEN 'children: 0 of 2 finished' END,
       CASE g %% 5 WHEN 3 THEN 'RuntimeError: try again' END,
       CASE g %% 5 WHEN 3 THEN 1 ELSE 0 END
FROM generate_series(1, %(rows)s) AS g
"""

#: ``%(rows)s`` one-step runs in one transaction: timers that ended a second ago
#: (``%(timers)s``), else new runs. Either way every one is due at the commit.
START_DUE = """
INSERT INTO workflows (workflow_type, input_data, run_after, waiting_for)
SELECT %(type)s, '{"steps": 1}', CASE WHEN %(timers)s THEN now() - interval '1 second' END,
       CASE WHEN %(timers)s THEN 'timer: nap' END
FROM generate_series(1, %(rows)s)
"""

#: Of the runs finished since ``%(since)s``: how many, the seconds from the
#: first start to the last finish, and the longest time no run started.
DRAINED = """
SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))::float8,
       extract(epoch FROM max(gap))::float8
FROM (SELECT finished_at, started_at, started_at - lag(started_at) OVER (ORDER BY started_at) AS gap
      FROM workflows WHERE status = 'completed' AND started_at >= %(since)s) AS runs
"""


def load_waiting(database: ScratchDatabase, workflow_type: str, rows: int) -> float:
    """``rows`` waiting runs (``LOAD_WAITING``), analysed; returns the rows a second."""
    started = time.perf_counter()
    database.execute(LOAD_WAITING, {"type": workflow_type, "rows": rows})
    database.execute("VACUUM ANALYZE workflows")
    return rows / (time.perf_counter() - started)


def waiting_size(database: ScratchDatabase) -> list[Figure]:
    """What the waiting runs cost: the table's and the indexes' size a million of them."""
    rows = database.scalar("SELECT count(*) FROM workflows WHERE status = 'pending'")
    table, indexes = database.one(
        "SELECT pg_table_size('workflows'), pg_indexes_size('workflows')",
    )
    per_million = 1e6 / max(rows, 1) / 2**20
    return [
        Figure(f"  table size a million waiting runs ({rows} loaded)", table * per_million, "MB"),
        Figure("  index size a million waiting runs, all indexes", indexes * per_million, "MB"),
    ]


def drain_due(
    database: ScratchDatabase, workflow_type: str, rows: int, timers: bool, timeout: float
) -> tuple[float, float]:
    """Start ``rows`` due runs in one transaction (timers that have ended, or
    new runs), wait until the workers finished them, and return their rate
    (from the first start to the last finish) and the longest time no run started."""
    database.execute("VACUUM ANALYZE workflows")  # the previous drain's dead index entries: autovacuum's work
    since = database.scalar("SELECT now()")
    database.execute(START_DUE, {"type": workflow_type, "rows": rows, "timers": timers})
    database.wait_until_idle(timeout=timeout)
    done, seconds, gap = database.one(DRAINED, {"since": since})
    if done != rows:
        raise RuntimeError(f"{done} of {rows} runs finished after their {'timers' if timers else 'start'}")
    return rows / seconds, gap

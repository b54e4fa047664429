"""``benchmark --fan-out N``: one parent of N one-step children beside N
independent one-step runs, on the same workers in the same run, and how many
times the parent was woken while it waited."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from django.db import connections

from orchestration import start_workflow, start_workflows
from orchestration.conf import conf

from .workflows import WORKFLOW_TYPE

if TYPE_CHECKING:
    from .scratch import ScratchDatabase

#: The parent's workflow type (registered with the benchmark's, ``workflows.register``).
FAN_OUT_TYPE = "benchmark_fan_out"

#: One row each time the parent's function runs (its first claim, and each wake-up):
#: measurement only, written outside any step so that a replay adds one too.
CLAIMS_TABLE = "CREATE TABLE IF NOT EXISTS benchmark_fan_out_claims (workflow_id uuid, at timestamptz DEFAULT now())"

#: Seconds from the runs' start (the enqueue's commit) to the last one's end, of the runs ``%s``.
ELAPSED = """
SELECT count(*) FILTER (WHERE status = 'completed'), extract(epoch FROM max(finished_at) - min(created_at))::float8
FROM workflows WHERE id = ANY(%s)
"""


def fan_out(ctx: Any, data: dict[str, Any]) -> None:
    """Start ``children`` one-step runs with ``ctx.start_children`` and wait for them."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute("INSERT INTO benchmark_fan_out_claims (workflow_id) VALUES (%s)", [ctx.workflow_id])
    ctx.wait_for(ctx.start_children(WORKFLOW_TYPE, [{"steps": 1}] * data["children"]))


def prepare(database: ScratchDatabase) -> None:
    database.execute(CLAIMS_TABLE)


def one_parent(database: ScratchDatabase, children: int) -> tuple[float, int]:
    """Start one parent of ``children`` one-step children and wait until it
    completed: the seconds from its start to its end, and its wake-ups."""
    with database.queue_alias():
        parent = start_workflow(FAN_OUT_TYPE, {"children": children})
    database.wait_until_idle(timeout=120 + children / 20)
    (done, seconds) = database.one(ELAPSED, [[parent.pk]])
    if not done:
        raise RuntimeError(f"the fan-out parent {parent.pk} did not complete in {database.name}")
    claims = database.scalar("SELECT count(*) FROM benchmark_fan_out_claims WHERE workflow_id = %s", [parent.pk])
    return seconds, claims - 1


def independent_runs(database: ScratchDatabase, count: int) -> float:
    """Start ``count`` one-step runs in one statement and wait until every one
    completed: the seconds from their start to the last one's end."""
    with database.queue_alias():
        ids = [run.pk for run in start_workflows(WORKFLOW_TYPE, [{"steps": 1}] * count)]
    database.wait_until_idle(timeout=120 + count / 20)
    done, seconds = database.one(ELAPSED, [ids])
    if done != count:
        raise RuntimeError(f"{done} of {count} independent runs completed in {database.name}")
    return seconds


def reset(database: ScratchDatabase) -> None:
    """An empty table before each measurement, so that neither drains behind the other's dead rows."""
    database.execute("TRUNCATE workflow_waits")
    database.reset()
    time.sleep(0.2)  # the workers' next poll finds the table empty

"""The result-wait measurement of ``manage.py benchmark``: callers in this
process await runs that the worker processes finish, and each caller's delay
from the run's completion (its ``finished_at``) to its return is a sample."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from orchestration import aget_result, start_workflow
from orchestration.listen import result_listener

from .scratch import ScratchDatabase
from .workflows import WORKFLOW_TYPE

#: The first run falls due this long after the callers start waiting, and this much later a caller
#: (their reads before the wait share the async ORM's one thread); the others one ``SPACING`` apart.
FIRST_DUE = 0.5
FIRST_DUE_A_CALLER = 0.0075
SPACING = 0.01


def wait_delays(database: ScratchDatabase, count: int) -> list[float]:
    """Start ``count`` one-step runs falling due one by one, await them all
    (``aget_result``, one task each, on one event loop) and return each
    caller's delay from completion to return, in milliseconds."""
    database.reset()
    with database.queue_alias():
        first = timezone.now() + datetime.timedelta(seconds=FIRST_DUE + FIRST_DUE_A_CALLER * count)
        runs = [
            start_workflow(WORKFLOW_TYPE, {"steps": 1}, run_after=first + datetime.timedelta(seconds=n * SPACING))
            for n in range(count)
        ]
        returned = asyncio.run(_await_all(runs))
        result_listener.stop()
    finished = dict(database.all("SELECT id, extract(epoch FROM finished_at)::float8 FROM workflows"))
    return sorted((returned[run.pk] - finished[run.pk]) * 1000 for run in runs)


async def _await_all(runs: list[Any]) -> dict[Any, float]:
    returned: dict[Any, float] = {}

    async def caller(run: Any) -> None:
        await aget_result(run, timeout=60 + len(runs) * SPACING)
        returned[run.pk] = time.time()

    try:
        await asyncio.gather(*(caller(run) for run in runs))
    finally:
        await sync_to_async(connections.close_all)()  # the async ORM's thread, before its database is dropped
    return returned

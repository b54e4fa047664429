"""Single starts: ``start_workflow()`` and ``astart_workflow()`` one at a time,
each call timed, beside a bare single-row INSERT loop into the same table on
the same connection (psycopg, prepared, autocommit: a commit each, as each
start without a transaction around it).

The three run in alternate blocks, every other round in reverse order, so that
the machine's load, which moves from second to second, falls on each alike.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from orchestration import astart_workflow, start_workflow

from .scratch import ScratchDatabase

BARE_INSERT = "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s)"
#: Calls of one kind in a row; the first calls of each are not timed (connecting, preparing).
BLOCK = 50
WARM_UP = 20
KINDS = ("start", "astart", "bare")


def measure(database: ScratchDatabase, workflow_type: str, count: int) -> dict[str, list[float]]:
    """About ``count`` timed calls of each of ``KINDS`` (seconds each), on ``database``."""
    timings: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with database.queue_alias():
        connection = connections[database.alias]
        connection.ensure_connection()
        pg = connection.connection

        def starts(n: int, into: list[float]) -> None:
            for i in range(n):
                began = time.perf_counter()
                start_workflow(workflow_type, {"steps": 1, "n": i})
                into.append(time.perf_counter() - began)

        def bare(n: int, into: list[float]) -> None:
            for i in range(n):
                began = time.perf_counter()
                pg.execute(BARE_INSERT, [workflow_type, f'{{"steps": 1, "n": {i}}}'], prepare=True)
                into.append(time.perf_counter() - began)

        async def astarts(n: int, into: list[float]) -> None:
            for i in range(n):
                began = time.perf_counter()
                await astart_workflow(workflow_type, {"steps": 1, "n": i})
                into.append(time.perf_counter() - began)

        blocks: dict[str, Any] = {
            "start": starts,
            "astart": lambda n, into: asyncio.run(astarts(n, into)),
            "bare": bare,
        }
        for block in blocks.values():
            block(WARM_UP, [])
        block_size = min(BLOCK, count)
        for round_number in range(count // block_size):
            order = KINDS if round_number % 2 == 0 else KINDS[::-1]
            for kind in order:
                blocks[kind](block_size, timings[kind])
        # astart_workflow's calls ran on the connection of Django's thread for sync work: closed with it.
        asyncio.run(sync_to_async(lambda: connections[database.alias].close())())
    database.reset()
    return timings

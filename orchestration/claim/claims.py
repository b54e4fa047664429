"""Claiming runs, and completing the runs a process finished with its next claim.

SKIP LOCKED lets any number of workers claim side by side without ever taking
the same row; each claimed row gets its own lease token, and the claim commits
before any user code runs. A worker thread whose workflow returned asks for
its next one at once, so its completion waits for no more than that claim;
the threads of a process asking together share the claim, and the completions
with it (``worker.dispatch``). A worker that dies first loses the completion,
and the run's last step runs again, as if it had died just before an immediate
write (step bodies run at least once; a checkpoint is still written once).

A worker that serves a paused or limited queue claims with a limit-aware
statement instead (``rules``), after taking its limited queues' locks in the
same transaction and round trip.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from .. import waits
from ..conf import conf
from . import statements
from .batches import completion_params, write_progresses
from .lease import Lease
from .rules import Rules, rules_of
from .wire import run


@dataclass
class FinishedRun:
    """A run whose workflow function returned: its completion is written with
    the process's next claim."""

    run: Lease
    output: str  # the result, as JSON text
    started: float  # time.monotonic() when the attempt began


def claim(worker_id: str, queues: list[str] | None, limit: int = 1, limited: bool | None = None) -> list[Lease]:
    """Lock up to ``limit`` due workflows of ``queues`` (None: all), mark them
    running for ``worker_id``, and commit (``limited``: see ``finish_and_claim``)."""
    return finish_and_claim(worker_id, queues, [], limit, limited)[0]


def finish_and_claim(
    worker_id: str,
    queues: list[str] | None,
    finished: list[FinishedRun],
    limit: int,
    limited: bool | None = None,
    keys_or_rates: bool = True,
    limited_room: int | None = None,
) -> tuple[list[Lease], set[uuid.UUID]]:
    """Complete ``finished`` and claim up to ``limit`` workflows, in one
    transaction and one round trip; return the runs claimed and the ids of
    the runs completed (a finished run missing from them had lost its lease,
    and nothing of it was written). ``limited``, ``keys_or_rates``: whether a
    served queue is paused or limited, and by key or rate (``limited`` None:
    read both now, see ``rules.Rules``). ``limited_room``: how many of the runs
    claimed may be of queues with a concurrency limit (None: ``limit``)."""
    if not finished and not limit:
        return [], set()
    if limited is None:
        known = rules_of(queues)
        limited, keys_or_rates = known.limited, known.keys_or_rates
    if any(item.run.progress is not None for item in finished):
        # Their last reports, for the whole batch in one statement before the completions that end them.
        write_progresses([item.run for item in finished])

    def statement(completing: list[FinishedRun], claiming: int) -> tuple[list[Lease], set[uuid.UUID]]:
        return _statement(worker_id, queues, completing, claiming, limited, keys_or_rates, limited_room)

    if any(item.run.parent_id is not None for item in finished):
        return _finish_children_and_claim(finished, limit, statement)
    return statement(finished, limit)


def _statement(
    worker_id: str,
    queues: list[str] | None,
    finished: list[FinishedRun],
    limit: int,
    limited: bool,
    keys_or_rates: bool,
    limited_room: int | None,
) -> tuple[list[Lease], set[uuid.UUID]]:
    """``finish_and_claim`` in its one statement."""
    params = {**claim_params(worker_id, queues, finished), "limit": limit}
    if limited:
        room = limit if limited_room is None else limited_room
        rows = run(conf.DATABASE, statements.LIMIT_AWARE_CLAIMS[keys_or_rates], {**params, "limited_room": room})
    else:
        rows = run(conf.DATABASE, statements.CLAIM, params)
    completed = set(rows[0][-1] or ())
    for item in finished:
        if item.run.id in completed:
            item.run.checkpoint = None
    return _leases(row[:-1] for row in rows if row[0] is not None), completed


def _finish_children_and_claim(
    finished: list[FinishedRun],
    limit: int,
    statement: Callable[[list[FinishedRun], int], tuple[list[Lease], set[uuid.UUID]]],
) -> tuple[list[Lease], set[uuid.UUID]]:
    """``finish_and_claim`` of finished runs some of which are children: in one
    transaction, the completions, the children counted in their parents' waits
    (``waits.children_finished``), then the claim. The claim comes last: it
    skips the rows others hold, so this never waits for a row while holding
    runs it claimed, which a child's end elsewhere may want to wake."""
    with transaction.atomic(using=conf.DATABASE):
        _, completed = statement(finished, 0)
        ended = {item.run.id: item.run.parent_id for item in finished if item.run.id in completed}
        children = {child: parent for child, parent in ended.items() if parent is not None}
        if children:
            waits.children_finished(children)
        claimed, _ = statement([], limit) if limit else ([], set())
    return claimed, completed


def only_handed_over(rules: Rules, finished: list[FinishedRun], limit: int, limited_room: int | None) -> bool:
    """Whether a claim that completed ``finished`` may have taken no more runs
    of its limited queues than that because another claim held their turn
    (the counted claim's function, see ``functions``): then taking fewer than
    ``limit`` does not say that nothing more is due, and a thread left without
    a run claims again."""
    room = limit if limited_room is None else limited_room
    return rules.limited and not rules.keys_or_rates and 0 < len(finished) < room


def claim_statement(
    worker_id: str,
    queues: list[str] | None,
    finished: list[FinishedRun],
    limit: int,
    limited: bool = False,
    keys_or_rates: bool = True,
) -> tuple[str, dict[str, Any]]:
    """``statements.COMPLETE_AND_CLAIM`` (with ``limited``, ``COMPLETE_AND_CLAIM_LIMITED``,
    or without ``keys_or_rates`` ``COMPLETE_AND_CLAIM_COUNTED``) for
    ``limit`` runs, and its parameters: what the claim's function runs, for
    ``EXPLAIN`` by the benchmark and the tests (a limit-aware claim with its
    limit bound, as its function plans it; the other with its limit written in)."""
    params = claim_params(worker_id, queues, finished)
    if not limited:
        return statements.complete_and_claim(limit), params
    statement = statements.COMPLETE_AND_CLAIM_LIMITED if keys_or_rates else statements.COMPLETE_AND_CLAIM_COUNTED
    return statement.replace("{limit}", "%(limit)s::integer"), {**params, "limit": limit, "limited_room": limit}


def claim_params(worker_id: str, queues: list[str] | None, finished: list[FinishedRun]) -> dict[str, Any]:
    """The claim's parameters but its limit: ``finished``'s completions, the worker, the queues."""
    completions = completion_params([(item.run, item.output) for item in finished])
    # A list, adapted by psycopg as text[]; NULL: every queue.
    return {**completions, "worker": worker_id, "queues": list(queues) if queues else None}


def _leases(rows: Iterable[tuple[Any, ...]]) -> list[Lease]:
    """The claimed rows as runs, by the columns of the claim's functions (``functions``)."""
    runs = []
    now = time.monotonic()
    for (
        workflow_id,
        workflow_type,
        input_data,
        lease_token,
        attempts,
        max_retries,
        queue,
        parent_id,
        deadline,
        fresh,
    ) in rows:
        if isinstance(input_data, str):  # Django reads jsonb as text
            input_data = json.loads(input_data)
        run = Lease(
            id=workflow_id,
            workflow_type=workflow_type,
            input_data=input_data,
            lease_token=lease_token,
            attempts=attempts,
            max_retries=max_retries,
            queue=queue,
            parent_id=parent_id,
            deadline=deadline,
            fresh=fresh,
            placeholder=1 if fresh else None,  # step 1, recorded running by the claim
            claimed_at=now,
        )
        runs.append(run)
    return runs

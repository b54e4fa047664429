"""What one statement writes for a batch of leases (``claims``): the
completions' parameters and the progress values their runs kept. Rows are
taken in id order, so that two batches lock them in one order and never
deadlock. A lease (``lease.Lease``, which writes through these too) is typed
``Any`` here: the lease module imports this one, not the other way round."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import connections

from ..conf import conf
from . import statements
from .wire import run


def write_progresses(leases: list[Any]) -> set[uuid.UUID]:
    """Write the progress each of ``leases`` keeps (``Lease.note_progress``), in
    one statement (``statements.PROGRESS_WRITE``), each fenced by its lease;
    return the ids written. A value reported while it is written stays kept."""
    pending = sorted(((lease, lease.progress) for lease in leases if lease.progress is not None), key=_by_id)
    if not pending:
        return set()
    now = time.monotonic()
    params = {
        "ids": _array(lease.id.hex for lease, _ in pending),
        "leases": _array(lease.lease_token.hex for lease, _ in pending),
        "progress": "[" + ",".join(progress.text for _, progress in pending if progress is not None) + "]",
        "unflushed": not connections[conf.DATABASE].in_atomic_block,
    }
    written = {row[0] for row in run(conf.DATABASE, statements.PROGRESS_WRITE, params)}
    for lease, progress in pending:
        lease.progress_written_at = now
        if lease.progress is progress:
            lease.progress = None
    return written


def _by_id(item: tuple[Any, Any]) -> int:
    return item[0].id.int


def _array(values: Iterable[str]) -> str:
    """A PostgreSQL array literal of ``values``: psycopg's list dumper costs more."""
    return "{" + ",".join(values) + "}"


def completion_params(finished: list[tuple[Any, str]]) -> dict[str, Any]:
    """``statements.COMPLETE_AND_CLAIM``'s parameters that complete each ``(lease,
    output as JSON text)``, with its deferred checkpoint; in id order, so that
    two batches lock their rows in one order."""
    finished = sorted(finished, key=_by_id)
    checkpoints = [lease.checkpoint for lease, _ in finished]
    now = time.monotonic()
    return {
        "ids": _array(lease.id.hex for lease, _ in finished),  # a uuid's 32 hex digits: cheaper than str()
        "leases": _array(lease.lease_token.hex for lease, _ in finished),
        "outputs": "[" + ",".join(output for _, output in finished) + "]",
        "steps": _array(str(checkpoint.number) if checkpoint else "NULL" for checkpoint in checkpoints),
        "step_names": json.dumps([checkpoint.name if checkpoint else None for checkpoint in checkpoints]),
        "step_outputs": "[" + ",".join(checkpoint.output if checkpoint else "null" for checkpoint in checkpoints) + "]",
        "ages": _array(f"{checkpoint.age(now) if checkpoint else 0.0:.6f}" for checkpoint in checkpoints),
    }

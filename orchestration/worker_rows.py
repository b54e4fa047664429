"""The ``runworkers`` processes as rows of ``workflow_workers``, for operators.

A process registers itself when it starts (``register``), its heartbeat
refreshes the row (``beat``) with the step bodies it abandoned that still run,
the row is marked when the process begins to stop (``stopping``), and a clean
stop deletes it (``remove``). A process that restarts itself at
``MAX_ABANDONED_BODIES`` registers a new row, with its restarts so far. A
process that dies without stopping (SIGKILL, a lost machine) stops
heartbeating: the stuck sweep marks its row gone (``mark_gone``) after
``STUCK_AFTER``, as it reclaims the runs the process held, and deletes rows
gone for a day.

The rows are for watching, and one hint: a process sizes how far it claims
ahead under a concurrency limit by the live rows serving the queue
(``claim.rules.concurrency_share``); no guarantee rests on them. A failure to write
one (the table not migrated yet, say) is logged, never raised into the worker.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import logging
import os
import socket
import threading
from typing import Any

from django.db import DatabaseError, InterfaceError, connections, transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now

from .conf import conf
from .models import Workflow, WorkflowStatus, WorkflowWorker
from .outages import is_outage

logger = logging.getLogger(__name__)

#: Rows marked gone are kept this long, then deleted by the sweep.
GONE_ROWS_KEPT = datetime.timedelta(days=1)

#: What this process registered, by worker id: ``beat`` writes it again if the
#: row was deleted (or marked gone while the process was paused).
_registered: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def package_version() -> str:
    try:
        return importlib.metadata.version("django-orchestration")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def register(worker_id: str, *, queues: list[str] | None, concurrency: int, restarts: int = 0) -> None:
    """Write this process's row (or refresh it): ``worker_id``, host, pid, queues, threads, version,
    and how many times the process restarted itself before."""
    fields = {
        "host": socket.gethostname()[:255],
        "pid": os.getpid(),
        "queues": sorted(queues) if queues else None,
        "concurrency": concurrency,
        "version": package_version()[:50],
        "restarts": restarts,
    }
    with _lock:
        _registered[worker_id] = fields
    _quietly("register", _write, worker_id, fields)


def beat(worker_id: str, *, abandoned_bodies: int = 0) -> bool:
    """Refresh the row's ``last_seen_at`` and its count of ``abandoned_bodies`` still
    running, in one statement (the heartbeat calls it); write it again if it is
    missing. True when the row was written."""
    with _lock:
        fields = _registered.get(worker_id)
    if fields is None:
        return False
    return bool(_quietly("refresh", _refresh, worker_id, {**fields, "abandoned_bodies": abandoned_bodies}))


def stopping(worker_id: str) -> None:
    """Mark the row of a process that began to stop: ``workflows health`` says
    so (not ready) until the process deletes its row at the end of its stop."""
    _quietly("mark stopping", lambda: _rows().filter(pk=worker_id, stopping_since=None).update(stopping_since=Now()))


def remove(worker_id: str) -> None:
    """Delete the row of a process that stops cleanly."""
    with _lock:
        _registered.pop(worker_id, None)
    # The process's last write: a connection lost meanwhile (a restart, a
    # failover) is replaced once, rather than leaving the row to the sweep.
    _quietly("remove", lambda: _rows().filter(pk=worker_id).delete(), reconnect=True)


def mark_gone(stuck_after: float | None = None) -> list[str]:
    """Mark gone every worker not seen for ``stuck_after`` seconds (default
    ``STUCK_AFTER``), delete those gone for ``GONE_ROWS_KEPT``, and return the
    ids marked. Run by the stuck sweep."""
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    silent_since = Now() - datetime.timedelta(seconds=stuck_after)

    def sweep() -> list[str]:
        # A savepoint: the sweep runs this inside its own transaction, which a
        # failure here (the table missing) must not break.
        with transaction.atomic(using=conf.DATABASE):
            dead = (
                _rows().filter(gone_at__isnull=True, last_seen_at__lt=silent_since).select_for_update(skip_locked=True)
            )
            ids = list(dead.values_list("pk", flat=True))
            if ids:
                _rows().filter(pk__in=ids).update(gone_at=Now())
            _rows().filter(gone_at__lt=Now() - GONE_ROWS_KEPT).delete()
            return ids

    ids = _quietly("mark gone", sweep) or []
    for worker_id in ids:
        logger.warning("worker %s: no heartbeat for %ss, marked gone", worker_id, f"{stuck_after:g}")
    return ids


# -- reads, for the admin, the CLI and the metrics -----------------------------------


def live_q(stuck_after: float | None = None) -> Q:
    """Workers not marked gone and seen within ``stuck_after`` seconds."""
    stuck_after = conf.STUCK_AFTER if stuck_after is None else stuck_after
    return Q(gone_at__isnull=True, last_seen_at__gte=Now() - datetime.timedelta(seconds=stuck_after))


def held_runs(worker_ids: list[str]) -> QuerySet[Workflow]:
    """The running workflows these workers hold (read through the running rows' index)."""
    return Workflow.objects.using(conf.DATABASE).filter(status=WorkflowStatus.RUNNING, worker_id__in=worker_ids)


def held_counts(worker_ids: list[str]) -> dict[str, int]:
    rows = held_runs(worker_ids).order_by().values_list("worker_id").annotate(n=Count("pk"))
    return {worker_id: n for worker_id, n in rows}


def state_of(worker: WorkflowWorker, now: datetime.datetime) -> str:
    """``live``, ``silent`` (no heartbeat for ``STUCK_AFTER``, not yet marked) or ``gone``."""
    if worker.gone_at is not None:
        return "gone"
    return "silent" if (now - worker.last_seen_at).total_seconds() > conf.STUCK_AFTER else "live"


# -- writing ------------------------------------------------------------------------------


def _rows() -> QuerySet[WorkflowWorker]:
    return WorkflowWorker.objects.using(conf.DATABASE)


def _write(worker_id: str, fields: dict[str, Any]) -> None:
    _rows().update_or_create(pk=worker_id, defaults={**fields, "last_seen_at": Now(), "gone_at": None})


def _refresh(worker_id: str, fields: dict[str, Any]) -> bool:
    refreshed = (
        _rows()
        .filter(pk=worker_id)
        .update(last_seen_at=Now(), gone_at=None, abandoned_bodies=fields["abandoned_bodies"])
    )
    if not refreshed:
        _write(worker_id, fields)
    return True


def _quietly(what: str, write: Any, *args: Any, reconnect: bool = False) -> Any:
    """``write(*args)``, a failure logged; with ``reconnect``, tried once more on
    a new connection when the connection was lost (outside a transaction)."""
    connection = connections[conf.DATABASE]
    try:
        return write(*args)
    except (DatabaseError, InterfaceError) as exc:
        if not reconnect or connection.in_atomic_block or not is_outage(exc):
            _failed(what, exc)
            return None
        connection.close()
    return _quietly(what, write, *args)


def _failed(what: str, exc: BaseException) -> None:
    logger.warning("worker rows: %s failed (%s: %s)", what, type(exc).__name__, exc)

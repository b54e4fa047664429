"""Flow control: pausing a queue, and limiting how many of its runs run at once
(in all, and per ``concurrency_key``) and start per period.

A queue's rules are a row of ``workflow_queues`` (``models.WorkflowQueue``); no
row, or a row with no limit that is not paused, means no limit. Their
defaults come from ``ORCHESTRATION["QUEUES"]`` (``sync_settings``, run by every
``runworkers`` process as it starts); operators change them at run time here
(``set_queue_limits``, ``pause_queue``, ``resume_queue``), from the admin and
from ``manage.py workflow_queues``.

Workers enforce them in the claim itself, so the limits hold across every
process: a worker that serves a paused or limited queue claims with a
limit-aware statement after taking the locks of its limited queues (the
claim's variants: ``orchestration.claim``). Each worker reads which kind it
is once a poll interval (``claim.rules.RulesCache``), so a change reaches
every worker within one.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Q
from django.db.models.functions import Now

from .claim.statements import PENDING_QUEUES
from .claim.wire import run
from .conf import conf
from .errors import UnknownQueue
from .listen import notify_new_work
from .models import QueueStart, Workflow, WorkflowQueue, WorkflowStatus
from .registry import known_queues
from .validation import QUEUE_LIMITS, parse_rate, queue_defaults, validate_queue_limit

#: ``set_queue_limits``'s default for a limit it leaves as it is (None lifts one).
UNCHANGED: Any = type("Unchanged", (), {"__repr__": lambda self: "UNCHANGED"})()

#: The queues of pending or running runs, whatever names them: one probe of
#: ``idx_workflows_queue_claim`` a queue with pending runs (the claim's
#: ``PENDING_QUEUES``), and the running rows (as many as the workers hold)
#: through ``idx_workflows_running``.
QUEUES_IN_USE = f"""WITH RECURSIVE {PENDING_QUEUES})
SELECT name FROM pending_queue WHERE name IS NOT NULL
UNION
SELECT queue FROM workflows WHERE status = 'running'
"""

#: The queue of every run, finished ones too: a loose index scan of
#: ``idx_workflows_queue_created``, one probe a queue, however many runs each has.
RUN_QUEUES = """WITH RECURSIVE run_queue (name) AS (
    SELECT min(queue) FROM workflows
    UNION ALL
    SELECT (SELECT min(w.queue) FROM workflows AS w WHERE w.queue > r.name) FROM run_queue AS r WHERE r.name IS NOT NULL
)
SELECT name FROM run_queue WHERE name IS NOT NULL
"""


def sync_settings() -> None:
    """Write ``ORCHESTRATION["QUEUES"]``'s limits into the queues' rows: a queue
    with none gets one, a row whose limits came from the settings follows them
    (to no limit at all when the settings drop it; the row is kept), and a row
    an operator changed keeps the operator's. Idempotent; run by
    every ``runworkers`` process as it starts, and before every change here."""
    defaults = {name: limits for name, limits in queue_defaults(conf.QUEUES).items() if limits}
    rows = WorkflowQueue.objects.using(conf.DATABASE)
    with transaction.atomic(using=conf.DATABASE):
        rows.bulk_create(
            [WorkflowQueue(name=name, limits_from_settings=True, **limits) for name, limits in defaults.items()],
            ignore_conflicts=True,
        )
        for row in rows.select_for_update().filter(limits_from_settings=True):
            wanted = {limit: defaults.get(row.name, {}).get(limit) for limit in QUEUE_LIMITS}
            # A row the settings no longer limit stays, limiting nothing: the queue
            # is still listed, and an operator's pause of it holds.
            if any(getattr(row, limit) != value for limit, value in wanted.items()):
                rows.filter(pk=row.pk).update(updated_at=Now(), **wanted)
                _forget_starts(row.name, wanted)


def set_queue_limits(
    name: str,
    *,
    concurrency: int | None = UNCHANGED,
    key_concurrency: int | None = UNCHANGED,
    rate_limit: str | None = UNCHANGED,
    key_rate_limit: str | None = UNCHANGED,
) -> WorkflowQueue:
    """Change queue ``name``'s limits at run time; a limit not given stays as it
    is, and None lifts one. Every worker applies them within a poll interval.

    ``concurrency``: runs of the queue running at once, across every process;
    ``key_concurrency``: runs of one ``concurrency_key`` running at once;
    ``rate_limit`` / ``key_rate_limit``: claims in any window of a period, in
    all or per key, written ``"100/m"``, ``"10/s"``, ``"1000/h"``. The queue
    keeps them until changed again: later changes of ``ORCHESTRATION["QUEUES"]``
    no longer apply to it. Raises ``UnknownQueue`` or ``InvalidQueueLimit``
    before anything is written.
    """
    given = {"concurrency": concurrency, "key_concurrency": key_concurrency, "rate_limit": rate_limit,
             "key_rate_limit": key_rate_limit}  # fmt: skip
    changes = {limit: validate_queue_limit(limit, value) for limit, value in given.items() if value is not UNCHANGED}
    return _change(name, limits_from_settings=False, **changes)


def pause_queue(name: str) -> WorkflowQueue:
    """Stop claiming queue ``name``'s pending runs, on every worker within a poll
    interval. Running runs finish; waits (timers, events, children) still end,
    their runs pending until ``resume_queue``."""
    return _change(name, paused=True)


def resume_queue(name: str) -> WorkflowQueue:
    """Claim queue ``name``'s pending runs again; idle workers are woken at once."""
    return _change(name, paused=False)


def _change(name: str, **changes: Any) -> WorkflowQueue:
    check_queue(name)
    sync_settings()
    with transaction.atomic(using=conf.DATABASE):
        # A row made for a pause follows the settings' limits, as no row did.
        _rows().bulk_create([WorkflowQueue(name=name, limits_from_settings=True)], ignore_conflicts=True)
        _rows().filter(pk=name).update(updated_at=Now(), **changes)
        row = _rows().get(pk=name)
        _forget_starts(name, {limit: getattr(row, limit) for limit in QUEUE_LIMITS})
        notify_new_work(conf.DATABASE, name)  # at commit: a lifted limit or a resume frees work now
    return row


def check_queue(name: Any) -> None:
    """Raise ``UnknownQueue`` unless something names queue ``name``: a
    registered workflow, ``ORCHESTRATION["QUEUES"]``, a queue source, a queue
    row, or a run (by ``idx_workflows_queue_created``): a run started on a
    queue nothing else names can be paused and served like any other."""
    if isinstance(name, str) and (
        name in known_queues()
        or _rows().filter(pk=name).exists()
        or Workflow.objects.using(conf.DATABASE).filter(queue=name).exists()
    ):
        return
    raise UnknownQueue(
        f"No queue {name!r}: no registered workflow, ORCHESTRATION['QUEUES'], queue row or run names it "
        f"(known: {', '.join(sorted(queue_names()))})."
    )


def queues_in_use() -> set[str]:
    """The queues of pending or running runs, whatever names them."""
    return {name for (name,) in run(conf.DATABASE, QUEUES_IN_USE, {"queues": None})}


def queues_of_runs() -> set[str]:
    """The queue of every run, whatever its status (``RUN_QUEUES``)."""
    return {name for (name,) in run(conf.DATABASE, RUN_QUEUES, {})}


def queue_names() -> set[str]:
    """Every queue: those something can put work on (``known_queues``), those
    with a row, and those of any run."""
    return known_queues() | set(_rows().values_list("name", flat=True)) | queues_of_runs()


def add_rows_of_listed_queues() -> None:
    """Give every queue of ``queue_names`` a row, so the admin lists each with
    its pause and resume. A row added here limits nothing (the claim reads only
    paused or limited rows), and ``sync_settings`` keeps it."""
    missing = (known_queues() | queues_of_runs()) - set(_rows().values_list("name", flat=True))
    if missing:
        rows = [WorkflowQueue(name=name, limits_from_settings=True) for name in sorted(missing)]
        _rows().bulk_create(rows, ignore_conflicts=True)


def _forget_starts(name: str, limits: dict[str, Any]) -> None:
    """Without a rate limit a queue's claims are not logged: drop what was."""
    if limits.get("rate_limit") is None and limits.get("key_rate_limit") is None:
        QueueStart.objects.using(conf.DATABASE).filter(queue=name).delete()


def _rows() -> Any:
    return WorkflowQueue.objects.using(conf.DATABASE)


# -- what the admin, the overview and the command show --------------------------------


@dataclass(frozen=True)
class QueueState:
    """A queue's rules beside what it is doing now."""

    name: str
    paused: bool
    concurrency: int | None
    key_concurrency: int | None
    rate_limit: str | None
    key_rate_limit: str | None
    limits_from_settings: bool
    running: int
    #: Pending runs: due now, due later, or waiting for a timer, an event or children.
    pending: int
    #: Pending runs due now.
    due: int
    #: Claims in the current window of ``rate_limit``'s period.
    started: int | None
    #: Keys running as many runs as ``key_concurrency`` allows.
    saturated_keys: int

    @property
    def throttled(self) -> list[str]:
        """Why due runs of this queue wait (empty: they do not, or nothing is due)."""
        if not self.due:
            return []
        reasons = ["paused"] if self.paused else []
        if self.concurrency is not None and self.running >= self.concurrency:
            reasons.append(f"at its concurrency limit ({self.running} of {self.concurrency} running)")
        if self.rate_limit is not None and self.started is not None and self.started >= parse_rate(self.rate_limit)[0]:
            reasons.append(f"at its rate limit ({self.started} started, {self.rate_limit})")
        if self.saturated_keys:
            reasons.append(f"{self.saturated_keys} key(s) at their limit of {self.key_concurrency}")
        return reasons


def queue_states(names: list[str] | None = None) -> list[QueueState]:
    """The state of every queue (``queue_names``: a registered workflow's, the
    settings', a row's, any run's) or of ``names``, by name; a queue without a
    row has no limit and is not paused."""
    rows = _rows().all() if names is None else _rows().filter(pk__in=names)
    queues = {row.name: row for row in rows}
    for name in queue_names() if names is None else ():
        queues.setdefault(name, WorkflowQueue(name=name))
    workflows = Workflow.objects.using(conf.DATABASE).filter(queue__in=list(queues)).order_by()
    running = dict(workflows.filter(status=WorkflowStatus.RUNNING).values_list("queue").annotate(n=Count("pk")))
    by_queue = workflows.filter(status=WorkflowStatus.PENDING).values_list("queue")
    due_now = Q(run_after__isnull=True) | Q(run_after__lte=Now())
    counts = list(by_queue.annotate(n=Count("pk"), due=Count("pk", filter=due_now)))
    pending = {name: n for name, n, _ in counts}
    due = {name: n for name, _, n in counts}
    states = []
    for name, row in sorted(queues.items()):
        started = started_in_window(name, row.rate_limit) if row.rate_limit is not None else None
        saturated = 0
        if row.key_concurrency is not None:
            keyed = workflows.filter(queue=name, status=WorkflowStatus.RUNNING, concurrency_key__isnull=False)
            per_key = keyed.values("concurrency_key").annotate(n=Count("pk")).filter(n__gte=row.key_concurrency)
            saturated = per_key.count()
        limits = {limit: getattr(row, limit) for limit in QUEUE_LIMITS}
        states.append(
            QueueState(name, row.paused, **limits, limits_from_settings=row.limits_from_settings,
                       running=running.get(name, 0), pending=pending.get(name, 0), due=due.get(name, 0),
                       started=started, saturated_keys=saturated)
        )  # fmt: skip
    return states


def started_in_window(name: str, rate_limit: str) -> int:
    """Claims of queue ``name`` in the window of ``rate_limit``'s period that ends now."""
    since = Now() - datetime.timedelta(seconds=parse_rate(rate_limit)[1])
    return QueueStart.objects.using(conf.DATABASE).filter(queue=name, started_at__gt=since).count()

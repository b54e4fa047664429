"""What a worker knows of the queues it serves (``RulesCache``), and so which
claim it runs (the package's table): a paused or limited queue among them
makes it claim with a limit-aware statement, by key or rate or only counted,
and a concurrency limit bounds how far it claims ahead.

Claiming ahead (``worker.dispatch``) takes slots of a concurrency limit like
running runs do, so a process that claims ahead for its threads could hold
every slot while the threads of the others idle. Each process therefore
claims ahead only up to its share of the limit (``concurrency_share``): the
limit split among the live processes that serve the queue, by their threads.
The share only shapes claiming ahead; the limit itself is still enforced by
the claim, across every process, whatever the shares are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db.models import Q

from ..conf import conf
from ..models import WorkflowQueue, WorkflowWorker
from ..validation import QUEUE_LIMITS
from ..worker_rows import live_q

#: The rows that restrict their queue: paused, or with a limit.
RESTRICTING = Q(paused=True) | Q(*(Q(**{f"{limit}__isnull": False}) for limit in QUEUE_LIMITS), _connector=Q.OR)


@dataclass(frozen=True)
class Rules:
    """What a worker knows of the queues it serves."""

    #: One of them is paused or limited: claim with ``statements.COMPLETE_AND_CLAIM_LIMITED``...
    limited: bool = False
    #: ... if one of them has a per-key or a rate limit; else ``statements.COMPLETE_AND_CLAIM_COUNTED`` is enough.
    keys_or_rates: bool = False


def rules_of(queues: list[str] | None) -> Rules:
    """The rules of ``queues`` (None: every queue), read now."""
    rows = WorkflowQueue.objects.using(conf.DATABASE).filter(RESTRICTING)
    if queues is not None:
        rows = rows.filter(name__in=queues)
    found = list(rows.values_list("key_concurrency", "rate_limit", "key_rate_limit"))
    return Rules(limited=bool(found), keys_or_rates=any(value is not None for row in found for value in row))


def _concurrency_limits(queues: list[str] | None) -> dict[str, int]:
    """The concurrency limit of each of ``queues`` (None: every queue) that has one and is not paused."""
    limits = WorkflowQueue.objects.using(conf.DATABASE).filter(paused=False, concurrency__isnull=False)
    if queues is not None:
        limits = limits.filter(name__in=queues)
    return {name: concurrency or 0 for name, concurrency in limits.values_list("name", "concurrency")}  # not NULL


def concurrency_share(queues: list[str] | None, worker_id: str, threads: int) -> int | None:
    """The runs a process of ``threads`` threads may hold before it claims
    ahead no more: of each concurrency limit among ``queues`` (None: every
    queue) that is not paused, the part its threads make of the threads of the
    live processes serving that queue (``workflow_workers``, this one counted
    whether its row is there or not), at least 1; the least of them. None: no
    such limit."""
    return _share_of(_concurrency_limits(queues), worker_id, threads)


def _share_of(limits: dict[str, int], worker_id: str, threads: int) -> int | None:
    """``concurrency_share`` of these ``limits`` (``_concurrency_limits``)."""
    if not limits:
        return None
    others = list(
        WorkflowWorker.objects.using(conf.DATABASE)
        .filter(live_q())
        .exclude(pk=worker_id)
        .values_list("queues", "concurrency")
    )
    shares = []
    for name, concurrency in limits.items():
        serving = threads + sum(count for served, count in others if served is None or name in served)
        shares.append(max(1, concurrency * threads // serving))
    return min(shares)


class RulesCache:
    """A worker's ``Rules``, and its ``concurrency_share`` when limited, read
    again once ``interval`` seconds have passed (on the claimer's thread,
    before its claim)."""

    def __init__(self, queues: list[str] | None, interval: float, worker_id: str = "", threads: int = 1) -> None:
        self.queues = queues
        self.interval = interval
        self.worker_id = worker_id
        self.threads = threads
        self.known = Rules()
        #: ``concurrency_share`` as last read (None: no concurrency limit, or not limited).
        self.share: int | None = None
        #: The queues served whose concurrency limit the share is of ...
        self.limited_queues: frozenset[str] = frozenset()
        #: ... and whether others are served too, whose runs the share does not count.
        self.mixed = False
        self._read_at: float | None = None

    def current(self) -> Rules:
        now = time.monotonic()
        if self._read_at is None or now - self._read_at >= self.interval:
            self.known = rules_of(self.queues)
            limits = _concurrency_limits(self.queues) if self.known.limited else {}
            self.share = _share_of(limits, self.worker_id, self.threads)
            self.limited_queues = frozenset(limits)
            self.mixed = bool(limits) and (self.queues is None or not self.limited_queues.issuperset(self.queues))
            self._read_at = now
        return self.known

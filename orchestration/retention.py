"""Retention: delete finished workflows, and their steps, once they are old enough.

Only completed, failed and cancelled workflows are ever deleted, and only those
that finished before the cutoff; a finished child whose parent has not finished
is kept (its parent may wait for it). A workflow's events go with it, so the
events of a workflow that is not finished are never deleted. Each batch is its own short transaction: it
locks its rows with SKIP LOCKED, so a workflow an operator is retrying at that
moment is left alone, and it deletes the workflows with everything that hangs
off them (steps, and whatever else points at a workflow) in one go, so no batch
leaves a workflow without its steps.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import Coalesce

from .conf import conf
from .models import FINISHED_STATUSES, Workflow, WorkflowStep


@dataclasses.dataclass
class PurgeProgress:
    workflows: int = 0
    steps: int = 0
    #: Matching workflows counted before the first batch.
    expected: int = 0
    batches: int = 0


def _validate_statuses(statuses: Iterable[str] | None) -> list[str]:
    chosen = list(dict.fromkeys(statuses)) if statuses else [str(status) for status in FINISHED_STATUSES]
    unfinished = [status for status in chosen if status not in FINISHED_STATUSES]
    if unfinished:
        raise ValueError(
            f"Only finished workflows can be purged ({', '.join(FINISHED_STATUSES)}), not {', '.join(unfinished)}."
        )
    return chosen


def purgeable(cutoff: datetime.datetime, statuses: Iterable[str] | None = None) -> QuerySet[Workflow]:
    """Finished workflows, of ``statuses`` (default: all finished ones), that
    finished before ``cutoff``, but for children whose parent has not finished:
    the parent may still wait for them, or read them again."""
    chosen = _validate_statuses(statuses)
    workflows = Workflow.objects.using(conf.DATABASE)
    unfinished_parent = workflows.filter(pk=OuterRef("parent_id")).exclude(status__in=FINISHED_STATUSES)
    return (
        workflows.alias(finished=Coalesce("finished_at", "updated_at"))
        .filter(status__in=chosen, created_at__lt=cutoff, finished__lt=cutoff)
        .exclude(Exists(unfinished_parent))
    )


def purge_workflows(
    cutoff: datetime.datetime,
    statuses: Iterable[str] | None = None,
    *,
    batch_size: int = 1000,
    dry_run: bool = False,
    on_batch: Callable[[PurgeProgress], None] | None = None,
) -> PurgeProgress:
    """Delete finished workflows that finished before ``cutoff``, with their steps.

    Works in batches of ``batch_size`` workflows, calling ``on_batch`` after
    each; ``dry_run`` only counts. Pending and running workflows are never
    touched, whatever ``statuses`` says (asking for them raises ``ValueError``),
    nor a finished child whose parent has not finished (see ``purgeable``).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    chosen = _validate_statuses(statuses)
    progress = PurgeProgress(expected=purgeable(cutoff, chosen).count())
    if dry_run or not progress.expected:
        return progress
    candidates = purgeable(cutoff, chosen).order_by("created_at").select_for_update(skip_locked=True)
    while True:
        with transaction.atomic(using=conf.DATABASE):
            batch = list(candidates.values_list("pk", flat=True)[:batch_size])
            if not batch:
                return progress
            # Django's deletion follows every relation to a workflow (steps, and
            # any added later), deferring everything but the primary key.
            _, deleted = Workflow.objects.using(conf.DATABASE).filter(pk__in=batch).only("pk").delete()
        progress.workflows += deleted.get(Workflow._meta.label, 0)
        progress.steps += deleted.get(WorkflowStep._meta.label, 0)
        progress.batches += 1
        if on_batch is not None:
            on_batch(progress)

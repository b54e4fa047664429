"""Which of a run's steps a page shows. A run may record tens of thousands of
steps (an import that checkpoints each batch, a loop over a customer list);
its page reads and draws a few dozen of them whatever their number, in a fixed
number of queries:

- ``read``: the first steps, the last ones, the one the run is at (where it
  failed, waits or runs) and a range asked for (``?steps=`` on the admin's
  run page, ``--steps FROM:TO`` of ``manage.py workflows show``), with the
  gaps between them, so a page can link to the rest;
- ``spans``: the run's timeline, drawn one bar a group of steps once they are
  too many to draw one by one, each group's times and worst status read in
  one aggregate query.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math
import re
import uuid
from typing import Any

from django.db.models import Count, F, Max, Min, Q

from ..conf import conf
from ..models import StepStatus, WorkflowStep
from .charts import StepTiming

#: A run of this many steps or fewer is shown whole, and drawn one bar a step.
WHOLE_UP_TO = 50
#: Steps shown from the start of a longer run, and from its end.
HEAD = 10
TAIL = 10
#: Steps a page of the rest shows, and the most a range asked for on a page shows.
PAGE = 50
MOST_ASKED = 200
#: Bars of a timeline summarised in groups of steps, at most.
SPANS = 50

#: What ``read`` loads of each step: everything a page shows of it.
FIELDS = (
    "step_number",
    "step_name",
    "status",
    "attempts",
    "started_at",
    "completed_at",
    "error_message",
    "output_data",
)

# A span's status is that of its worst step: a failed step in it first, then a running, a pending one.
_WORST_FIRST = (StepStatus.FAILED, StepStatus.RUNNING, StepStatus.PENDING)

_RANGE = re.compile(r"\s*(\d*)\s*([:-]?)\s*(\d*)\s*")


class InvalidRange(ValueError):
    """A range of steps that is neither ``N``, ``FROM:TO``, ``FROM:`` nor ``:TO``."""


@dataclasses.dataclass(frozen=True)
class Gap:
    """Steps ``first`` to ``last`` that a window leaves out."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclasses.dataclass(frozen=True)
class Window:
    #: The highest step number the run recorded (0: none yet); steps are numbered from 1 without holes.
    last: int
    #: The steps shown, in order: model instances loaded with ``FIELDS`` only.
    steps: list[WorkflowStep]
    #: The step after the last completed one, where the run failed, waits or runs, if it was recorded.
    at_fault: WorkflowStep | None
    #: The steps left out, in order, each between two shown ones (the last step is always shown).
    gaps: list[Gap]
    #: The range asked for, as shown (cut to ``MOST_ASKED`` steps and to the run's steps), if any.
    asked: tuple[int, int] | None = None

    @property
    def whole(self) -> bool:
        return not self.gaps


@dataclasses.dataclass(frozen=True)
class StepSpan(StepTiming):
    """Steps ``number`` to ``last`` drawn as one bar: from the first start to the last end, in the worst status."""

    last: int
    count: int


def parse_range(text: str) -> tuple[int, int | None]:
    """A range of steps as (first, last), last None for "to the end": ``"N"`` is step N
    and a page after it, ``"FROM:TO"`` (or ``FROM-TO``) those, ``"FROM:"`` from there on, ``":TO"`` up to there.

    >>> parse_range("40:60"), parse_range("7"), parse_range("9000:"), parse_range(":20")
    ((40, 60), (7, 56), (9000, None), (1, 20))
    """
    found = _RANGE.fullmatch(text)
    if not found or not (found[1] or found[3]):
        raise InvalidRange(f"{text!r} is neither a step number nor a range of steps FROM:TO (as 40:60, 9000: or :20).")
    first = int(found[1]) if found[1] else 1
    if not found[2]:  # a lone number
        last: int | None = first + PAGE - 1
    else:
        last = int(found[3]) if found[3] else None
    if first < 1 or (last is not None and last < first):
        raise InvalidRange(f"{text!r}: steps are numbered from 1, and a range goes from its first step to its last.")
    return first, last


def shown_ranges(
    last: int, at: int | None, asked: tuple[int, int | None] | None, most: int | None = MOST_ASKED
) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """The ranges of step numbers a window of a run of ``last`` steps shows, merged and in
    order, and the range ``asked`` as shown (cut to the run's steps, and to ``most`` steps unless None).

    >>> shown_ranges(20_000, 7_001, (100, 149))
    ([(1, 10), (100, 149), (7001, 7001), (19991, 20000)], (100, 149))
    >>> shown_ranges(30, 31, None)
    ([(1, 30)], None)
    """
    if last <= 0:
        return [], None
    if last <= WHOLE_UP_TO:
        pieces = [(1, last)]
    else:
        pieces = [(1, HEAD), (last - TAIL + 1, last)]
        if at is not None and 1 <= at <= last:
            pieces.append((at, at))
    shown = None
    if asked is not None:
        first, to = asked
        to = last if to is None else min(to, last)
        if most is not None:
            to = min(to, first + most - 1)
        if first <= to:
            shown = (first, to)
            pieces.append(shown)
    merged: list[tuple[int, int]] = []
    for first, to in sorted(pieces):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], to))
        else:
            merged.append((first, to))
    return merged, shown


def last_step(workflow_id: uuid.UUID) -> int:
    """The highest step number of a run (0 when it recorded none): one read of the end of its index."""
    found = _steps(workflow_id).aggregate(last=Max("step_number"))["last"]
    return int(found or 0)


def read(
    workflow_id: uuid.UUID,
    current_step: int,
    asked: tuple[int, int | None] | None = None,
    *,
    most: int | None = MOST_ASKED,
) -> Window:
    """The window of a run's steps a page shows, in two queries whatever their number
    (``current_step``: the run's last completed step; ``asked``: as ``parse_range`` gives it)."""
    last = last_step(workflow_id)
    at = current_step + 1
    ranges, shown = shown_ranges(last, at, asked, most)
    if ranges:
        within = Q()
        for first, to in ranges:
            within |= Q(step_number__range=(first, to))
        steps = list(_steps(workflow_id).filter(within).order_by("step_number").only(*FIELDS))
    else:
        steps = []
    gaps = [Gap(a[1] + 1, b[0] - 1) for a, b in itertools.pairwise(ranges)]
    at_fault = next((step for step in steps if step.step_number == at), None)
    return Window(last, steps, at_fault, gaps, shown)


def spans(workflow_id: uuid.UUID, last: int, count: int = SPANS) -> list[StepSpan]:
    """A run's ``last`` steps in at most ``count`` groups of consecutive steps, one aggregate query."""
    size = max(1, math.ceil(last / count))
    rows = (
        _steps(workflow_id)
        .values(group=(F("step_number") - 1) / size)
        .order_by("group")
        .annotate(
            first=Min("step_number"),
            last=Max("step_number"),
            steps=Count("pk"),
            started=Min("started_at"),
            completed=Max("completed_at"),
            unfinished=Count("pk", filter=Q(started_at__isnull=False, completed_at__isnull=True)),
            **{status.value: Count("pk", filter=Q(status=status)) for status in _WORST_FIRST},
        )
    )
    return [_span(row) for row in rows]


def _span(row: dict[str, Any]) -> StepSpan:
    status = next((status.value for status in _WORST_FIRST if row[status.value]), StepStatus.COMPLETED.value)
    completed: datetime.datetime | None = None if row["unfinished"] else row["completed"]
    name = f"steps {row['first']:,}–{row['last']:,}" if row["last"] > row["first"] else f"step {row['first']:,}"
    return StepSpan(row["first"], name, status, row["started"], completed, row["last"], row["steps"])


def _steps(workflow_id: uuid.UUID) -> Any:
    return WorkflowStep.objects.using(conf.DATABASE).filter(workflow_id=workflow_id)

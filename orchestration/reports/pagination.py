"""A paginator for tables of millions of rows: exact counts while they are cheap.

``COUNT(*)`` reads every matching row, so on a workflows table that keeps
millions of finished runs each page of the admin list would pay for a full
scan. This paginator counts exactly only up to ``exact_limit`` rows (a bounded
scan that stops early); past that it takes PostgreSQL's own row estimate for
the same query, the one its planner keeps from ``ANALYZE`` (``pg_class.reltuples``
for the whole table).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property


class EstimatedCountPaginator(Paginator):
    #: Up to this many rows the count is exact.
    exact_limit = 10_000

    #: True once ``count`` holds an estimate rather than an exact figure.
    is_estimate = False

    #: The same rows as the list's, where another query counts them from an
    #: index alone (a tag's rows of ``workflow_tags``); None: the list's own.
    counted: QuerySet[Any] | None = None

    @cached_property
    def count(self) -> int:
        queryset = self.object_list if self.counted is None else self.counted
        if not isinstance(queryset, QuerySet):
            return super().count
        capped = queryset.order_by()[: self.exact_limit + 1].count()
        if capped <= self.exact_limit:
            return capped
        self.is_estimate = True
        return max(planner_estimate(queryset), capped)


def planner_estimate(queryset: QuerySet[Any]) -> int:
    """The number of rows PostgreSQL's planner expects ``queryset`` to return."""
    plan = json.loads(queryset.order_by().values("pk").explain(format="json"))
    if isinstance(plan, list):  # the statement's plans, as PostgreSQL gives them; Django gives the one
        plan = plan[0]
    return int(plan["Plan"]["Plan Rows"])

"""The console's list at scale: it runs under a statement timeout, so a page
that a filter makes slow on a huge table is cancelled by PostgreSQL and says
so, instead of holding a web worker (and a database backend) for minutes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse, TemplateResponse

from ..reports import stats

logger = logging.getLogger(__name__)

#: Seconds the list's statements may take, together, before PostgreSQL cancels them.
LIST_TIME_LIMIT = 5.0


def timed_out(exc: OperationalError) -> bool:
    """Whether ``exc`` is PostgreSQL cancelling a statement for its timeout."""
    return isinstance(exc.__cause__, psycopg.errors.QueryCanceled)


def time_limited(
    model_admin: Any, request: HttpRequest, page: Callable[[], HttpResponse], limit: float | None = None
) -> HttpResponse:
    """``page()``, rendered under the time limit (a GET's only: an action's
    writes are never cut short), or a page saying that it was cancelled."""
    if request.method not in ("GET", "HEAD"):
        return page()
    limit = LIST_TIME_LIMIT if limit is None else limit
    try:
        with stats.time_limit(limit):
            response = page()
            if isinstance(response, SimpleTemplateResponse):
                response.render()  # the list's rows are read while rendering
            return response
    except OperationalError as exc:
        if not timed_out(exc):
            raise
    logger.warning("admin: %s took longer than %ss and was cancelled", request.get_full_path(), limit)
    return TemplateResponse(
        request,
        "admin/orchestration/workflow/timed_out.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "This list took too long",
            "limit": limit,
            "query": request.GET.urlencode(),
        },
        status=503,
    )

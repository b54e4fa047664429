"""Moments under either ``USE_TZ``: the one place a datetime given to the API,
typed at the command line, or shown to an operator is put in the form the rest
of the engine compares.

The engine holds a moment as Django's ORM reads one back: aware with
``USE_TZ = True``; naive, in local time in ``TIME_ZONE``, with ``USE_TZ = False``
(Django's default before 5.0, and what ``timezone.now()`` returns there). A naive
datetime given with ``USE_TZ = True`` is refused: which zone it means is a guess.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from .errors import InvalidWorkflowInput


def given(value: Any, what: str) -> datetime.datetime:
    """``value``, a moment passed to the API (``run_after``, ...), as the engine
    holds it; raises ``InvalidWorkflowInput`` naming ``what`` when it is no
    datetime, or a naive one with ``USE_TZ = True``."""
    if not isinstance(value, datetime.datetime):
        raise InvalidWorkflowInput(f"{what} must be a datetime, not {type(value).__name__}.")
    if settings.USE_TZ and timezone.is_naive(value):
        raise InvalidWorkflowInput(
            f"{what} is a naive datetime, and USE_TZ = True: pass an aware one, such as "
            "django.utils.timezone.now() + timedelta(hours=1), or timezone.make_aware(value) "
            "for a wall-clock time in TIME_ZONE."
        )
    return as_django(value)


def typed(value: datetime.datetime) -> datetime.datetime:
    """A moment typed as text (the command line's ``--since``): without an
    offset it is a wall-clock time in the current time zone, whatever ``USE_TZ``."""
    return as_django(value if timezone.is_aware(value) else timezone.make_aware(value))


def as_django(value: datetime.datetime) -> datetime.datetime:
    """An aware moment (or, with ``USE_TZ = False``, a naive one in ``TIME_ZONE``)
    as the ORM holds one: aware with ``USE_TZ = True``, else naive in ``TIME_ZONE``."""
    if settings.USE_TZ:
        return value
    return timezone.make_naive(value) if timezone.is_aware(value) else value


def local(value: datetime.datetime) -> datetime.datetime:
    """A moment the engine holds (or a database driver returned, aware), aware
    in the current time zone: for showing it, and comparing it with an aware one."""
    return timezone.localtime(value if timezone.is_aware(value) else timezone.make_aware(value))

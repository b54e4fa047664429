"""System checks that explain a misconfiguration before a worker starts."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Warning, register
from django.core.management import CommandError
from django.db import connections, router

from .conf import DEFAULTS, conf
from .errors import InvalidQueueLimit
from .validation import queue_defaults

_POSITIVE_NUMBERS = ("STUCK_AFTER", "HEARTBEAT_INTERVAL", "POLL_INTERVAL", "RETRY_BACKOFF_MAX", "CONCURRENCY")
_NON_NEGATIVE_NUMBERS = (
    "ASYNC_CONCURRENCY",
    "DEFAULT_MAX_RETRIES",
    "RETRY_BACKOFF",
    "SHUTDOWN_GRACE",
    "MAX_PAYLOAD_BYTES",
)


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    problems: list[Any] = []
    for key in sorted(conf.user_keys() - DEFAULTS.keys()):
        problems.append(
            Warning(
                f"ORCHESTRATION[{key!r}] is not a setting of orchestration.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="orchestration.W001",
            )
        )
    for key in _POSITIVE_NUMBERS + _NON_NEGATIVE_NUMBERS:
        value = getattr(conf, key)
        minimum_ok = value > 0 if key in _POSITIVE_NUMBERS else value >= 0
        if isinstance(value, bool) or not isinstance(value, int | float) or not minimum_ok:
            bound = "a number above 0" if key in _POSITIVE_NUMBERS else "a number of 0 or more"
            problems.append(Error(f"ORCHESTRATION[{key!r}] is {value!r}; it must be {bound}.", id="orchestration.E001"))
    claim_ahead = conf.CLAIM_AHEAD
    whole_number = isinstance(claim_ahead, int) and not isinstance(claim_ahead, bool)
    if claim_ahead is not None and not (whole_number and claim_ahead >= 0):
        problems.append(
            Error(
                f"ORCHESTRATION['CLAIM_AHEAD'] is {claim_ahead!r}; it must be None (as many as the threads "
                "finish in about 50 ms) or a whole number of 0 (never) or more.",
                id="orchestration.E006",
            )
        )
    most_abandoned = conf.MAX_ABANDONED_BODIES
    if most_abandoned is not None and not (
        isinstance(most_abandoned, int) and not isinstance(most_abandoned, bool) and most_abandoned >= 1
    ):
        problems.append(
            Error(
                f"ORCHESTRATION['MAX_ABANDONED_BODIES'] is {most_abandoned!r}; it must be None (the process's "
                "--concurrency) or a whole number of 1 or more.",
                id="orchestration.E007",
            )
        )
    try:
        queue_defaults(conf.QUEUES)
    except InvalidQueueLimit as exc:
        problems.append(
            Error(
                f"ORCHESTRATION['QUEUES'] is invalid: {exc}",
                hint='A list of queue names, or a dict of queue to limits: {"payments": {"concurrency": 5, '
                '"key_concurrency": 1, "rate_limit": "100/m", "key_rate_limit": "10/s"}}.',
                id="orchestration.E005",
            )
        )
    if not problems and conf.HEARTBEAT_INTERVAL >= conf.STUCK_AFTER:
        problems.append(
            Error(
                "ORCHESTRATION['HEARTBEAT_INTERVAL'] must be shorter than STUCK_AFTER, "
                "or live workflows would be reclaimed as stuck.",
                id="orchestration.E002",
            )
        )
    problems.extend(check_database())
    return problems


def check_database() -> list[Any]:
    """The database that holds the tables must exist and be PostgreSQL (also
    run by the Tasks backend's checks when the app is not installed)."""
    alias = conf.DATABASE
    if alias not in settings.DATABASES:
        return [
            Error(f"ORCHESTRATION['DATABASE'] names {alias!r}, which is not in DATABASES.", id="orchestration.E003")
        ]
    if "postgresql" not in settings.DATABASES[alias].get("ENGINE", ""):
        return [
            Error(
                f"The database {alias!r} does not use PostgreSQL; orchestration needs it "
                "(SKIP LOCKED, LISTEN/NOTIFY, jsonb).",
                hint="Set ENGINE to 'django.db.backends.postgresql'.",
                id="orchestration.E004",
            )
        ]
    return []


def refuse_migrating_elsewhere(using: str, plan: Any = None, **kwargs: Any) -> None:
    """``pre_migrate``: refuse, before anything is written, a ``migrate`` that
    would create the app's tables on a database that is not PostgreSQL. The
    system check above says so too, but ``migrate --skip-checks`` skips it,
    and the first migration would be applied before the second failed."""
    vendor = connections[using].vendor
    if vendor == "postgresql" or not router.allow_migrate(using, "orchestration"):
        return
    if not any(migration.app_label == "orchestration" and not backwards for migration, backwards in plan or ()):
        return
    engine = settings.DATABASES[using].get("ENGINE", "")
    raise CommandError(
        f"orchestration's tables need PostgreSQL, and the database {using!r} is {vendor} ({engine}): "
        "nothing was migrated. Set its ENGINE to 'django.db.backends.postgresql', or keep the app's tables on a "
        "PostgreSQL database of their own with ORCHESTRATION['DATABASE'] and "
        "orchestration.routers.OrchestrationRouter."
    )

"""The few statements the ORM cannot express, named and kept in one place."""

from __future__ import annotations

from django.db import connections

#: Channel on which ``start_workflow`` announces new work; the payload is the queue.
NOTIFY_CHANNEL = "orchestration_new_work"

#: Key of the transaction-level advisory lock that lets one process at a time
#: sweep stuck workflows; the others skip the sweep instead of waiting.
RECLAIM_LOCK_KEY = 0x6F7263686573  # "orches"


def notify_new_work(alias: str, queue: str) -> None:
    """Wake idle workers. Inside a transaction Postgres delivers it at commit,
    so a rolled-back start never wakes anyone."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


def listen_statement() -> str:
    return f"LISTEN {NOTIFY_CHANNEL}"


def try_reclaim_lock(alias: str) -> bool:
    """Take the sweep lock for the current transaction, or return False at once."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [RECLAIM_LOCK_KEY])
        return bool(cursor.fetchone()[0])

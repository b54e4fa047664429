"""The benchmark's scratch databases: created beside the project's, migrated,
dropped at the end; no user data is read or written."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test.utils import override_settings
from psycopg.sql import SQL, Identifier

LOAD_FINISHED = """
INSERT INTO workflows (workflow_type, status, input_data, output_data, current_step, attempts,
                       created_at, updated_at, started_at, finished_at, error_message)
SELECT %s, CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'completed' END, jsonb_build_object('n', g), 'null',
       1, 1, t, t + interval '40 ms', t + interval '10 ms', t + interval '40 ms',
       CASE WHEN g %% 50 = 0 THEN 'RuntimeError: pre-loaded failure' END
FROM generate_series(1, %s) g, LATERAL (SELECT now() - make_interval(secs => (%s - g) * 0.1) AS t) ts
"""
LOAD_FINISHED_STEPS = """
INSERT INTO workflow_steps
    (workflow_id, step_number, step_name, status, output_data, started_at, completed_at, attempts)
SELECT id, 1, 'step 1', status, 'null', started_at, finished_at, 1 FROM workflows WHERE workflow_type = %s
"""


class ScratchDatabase:
    """A database this run creates, migrates and drops; never a user's."""

    def __init__(self, name: str, alias: str) -> None:
        self.name = name
        self.label = name.rsplit("_", 1)[-1]
        self.source_alias = alias
        self.alias = f"benchmark_{self.label}"

    @contextlib.contextmanager
    def created(self, keep: bool = False, every_app: bool = False, migrate_to: str | None = None) -> Iterator[None]:
        """The database, migrated (``migrate_to``: the app's schema as that migration of it left it)."""
        with connections[self.source_alias].cursor() as cursor:
            cursor.execute(SQL("CREATE DATABASE {}").format(Identifier(self.name)))
        connections.settings[self.alias] = {**connections.settings[self.source_alias], "NAME": self.name}
        try:
            apps = [] if every_app else ["orchestration"]  # every app: users, sessions, the admin's log
            target = [migrate_to] if migrate_to else []
            call_command("migrate", *apps, *target, database=self.alias, verbosity=0)
            yield
        finally:
            connections[self.alias].close()
            if not keep:
                with connections[self.source_alias].cursor() as cursor:
                    cursor.execute(SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(self.name)))

    @contextlib.contextmanager
    def queue_alias(self) -> Iterator[None]:
        """Point the app's ORCHESTRATION["DATABASE"] at this database."""
        with override_settings(ORCHESTRATION={**getattr(settings, "ORCHESTRATION", {}), "DATABASE": self.alias}):
            yield

    def server_facts(self) -> dict[str, str]:
        facts = {name: self.scalar(f"SHOW {name}") for name in ("server_version", "autovacuum", "synchronous_commit")}
        return {**facts, "cpus": str(os.cpu_count())}

    def reset(self) -> None:
        """Empty the tables, analyzed as ``migrate`` leaves them (TRUNCATE drops what ANALYZE knew)."""
        self.execute("TRUNCATE workflows CASCADE")
        self.execute("ANALYZE workflows, workflow_steps")

    def load_finished(self, workflow_type: str, rows: int) -> None:
        """``rows`` finished workflows of ``workflow_type`` (one in 50 failed), a step each."""
        self.execute(LOAD_FINISHED, [workflow_type, rows, rows])
        self.execute(LOAD_FINISHED_STEPS, [workflow_type])

    def conninfo(self) -> str:
        params = connections[self.source_alias].get_connection_params()
        keys = ("user", "password", "host", "port")
        return psycopg.conninfo.make_conninfo(dbname=self.name, **{k: params[k] for k in keys if params.get(k)})

    def execute(self, sql: str, params: Any = None) -> None:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(sql, params)

    def one(self, sql: str, params: Any = None) -> Any:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = None) -> list[Any]:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Any = None) -> Any:
        return self.one(sql, params)[0]

    def wait_until_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            # The runs that wait (``--not-due``) are not work to wait for. A probe of each
            # partial index, whatever the statistics: a scan of every pending run, 20 times a
            # second, took a core of the machine from the drain it waits for.
            conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off")
            busy = (
                "SELECT EXISTS (SELECT FROM workflows WHERE status = 'running') "
                "OR EXISTS (SELECT FROM workflows WHERE status = 'pending' AND run_after IS NULL) "
                "OR (SELECT run_after FROM workflows WHERE status = 'pending' AND run_after IS NOT NULL "
                "ORDER BY run_after LIMIT 1) <= now()"
            )
            while conn.execute(busy).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workflows still pending or running after {timeout:.0f}s in {self.name}")
                time.sleep(0.02)

"""The locks of an upgrade, measured (``manage.py benchmark_upgrade``).

A scratch database at the previous release's schema is loaded with finished
runs (one step each), then migrated one migration at a time while a stream of
starts and a worker's claims run beside it, each on a connection of its own.
The starts and claims are the previous release's statements on the columns it
knows, as its processes keep making them while ``migrate`` runs: an INSERT with
its ``ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL``, a claim
``FOR UPDATE SKIP LOCKED``, a step's checkpoint and the run's end. For each
migration: how long it took, and the longest any start, claim or checkpoint
waited while it ran (a statement counts for every migration it overlaps).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader

from .internals import queue_database
from .scratch import ScratchDatabase

#: The previous release's last migration (0.1.0's): the schema the load is made on.
PREVIOUS_RELEASE = ("0.1.0", "0005_workflows_parent_index_children_only")
APP = "orchestration"
LOAD_BATCH = 1_000_000

LOAD = """
WITH made AS (
    INSERT INTO workflows (workflow_type, status, input_data, output_data, current_step, attempts,
                           created_at, updated_at, started_at, finished_at)
    SELECT 'benchmark_upgrade', 'completed', jsonb_build_object('n', g), 'null', 1, 1,
           t, t + interval '40 ms', t + interval '10 ms', t + interval '40 ms'
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) g,
         LATERAL (SELECT now() - make_interval(secs => (%(rows)s::bigint - g) * 0.01) AS t) ts
    RETURNING id, started_at, finished_at
)
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at, completed_at)
SELECT id, 1, 'step 1', 'completed', 'null', started_at, finished_at FROM made
"""
START = """
INSERT INTO workflows (workflow_type, input_data, idempotency_key) VALUES ('benchmark_upgrade', %s, %s)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
"""
CLAIM = """
UPDATE workflows SET status = 'running', attempts = attempts + 1, lease_token = gen_random_uuid(),
       started_at = now(), updated_at = now()
WHERE id = (SELECT id FROM workflows WHERE status = 'pending' AND (run_after IS NULL OR run_after <= now())
            ORDER BY priority DESC, created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, lease_token
"""
CHECKPOINT = """
WITH step AS (
    INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at, completed_at)
    VALUES (%(id)s, 1, 'step 1', 'completed', 'null', now(), now())
)
UPDATE workflows SET status = 'completed', current_step = 1, output_data = 'null', finished_at = now(),
       updated_at = now()
WHERE id = %(id)s AND lease_token = %(lease)s
"""
KINDS = ("start", "claim", "checkpoint")


@dataclass
class Options:
    rows: int = 10_000_000
    start_rate: float = 50.0
    claim_rate: float = 50.0
    settle: float = 2.0
    keep: bool = False


@dataclass
class Timed:
    """The statements of one kind: when each began and ended (monotonic), and the errors."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)

    def longest(self, began: float, ended: float) -> float:
        """The longest statement that overlapped ``[began, ended]``."""
        return max((end - start for start, end in self.spans if start <= ended and end >= began), default=0.0)

    def count(self, began: float, ended: float) -> int:
        return sum(1 for start, end in self.spans if began <= end <= ended)

    def failed(self, began: float, ended: float) -> list[str]:
        return [error for at, error in self.errors if began <= at <= ended]


@dataclass
class Step:
    migration: str
    seconds: float
    longest: dict[str, float]
    made: dict[str, int]
    failed: int
    errors: list[str]

    def as_json(self) -> str:
        return json.dumps(
            {
                "migration": self.migration,
                "seconds": round(self.seconds, 3),
                **{f"longest_{kind}": round(value, 3) for kind, value in self.longest.items()},
                **{f"{kind}s": count for kind, count in self.made.items()},
                "failed": self.failed,
                "errors": self.errors,
            }
        )


class Load:
    """Starts at one rate and a worker's claims at another, each in a thread on a
    connection of its own, until stopped."""

    def __init__(self, conninfo: str, options: Options) -> None:
        self.conninfo = conninfo
        self.options = options
        self.timed = {kind: Timed() for kind in KINDS}
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._starts, name="starts", daemon=True),
            threading.Thread(target=self._claims, name="claims", daemon=True),
        ]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _paced(self, rate: float) -> Iterator[int]:
        began, number = time.monotonic(), 0
        while not self.stopping.is_set():
            time.sleep(max(0.0, began + number / rate - time.monotonic()))
            yield number
            number += 1

    def _timed(self, kind: str, run: Callable[[], Any]) -> Any:
        start = time.monotonic()
        try:
            return run()
        except psycopg.Error as error:
            self.timed[kind].errors.append((time.monotonic(), f"{kind}: {type(error).__name__}: {error}"))
            return None
        finally:
            self.timed[kind].spans.append((start, time.monotonic()))

    def _starts(self) -> None:
        token = secrets.token_hex(4)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            for number in self._paced(self.options.start_rate):
                key = f"upgrade-{token}-{number}" if number % 2 else None  # half with a key, as a user's mix
                self._timed("start", lambda: conn.execute(START, [json.dumps({"n": number}), key]))  # noqa: B023

    def _claims(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            for _ in self._paced(self.options.claim_rate):
                claimed = self._timed("claim", lambda: conn.execute(CLAIM).fetchone())
                if claimed:
                    parameters = {"id": claimed[0], "lease": claimed[1]}
                    self._timed("checkpoint", lambda: conn.execute(CHECKPOINT, parameters))  # noqa: B023


class UpgradeBenchmark:
    """Loads, then migrates one migration at a time under the load; ``run`` returns
    one ``Step`` a migration (the first is the load's steady state, before any)."""

    def __init__(self, options: Options, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.database = ScratchDatabase(f"orchestration_benchmark_{secrets.token_hex(3)}_upgrade", queue_database())
        self.server: dict[str, str] = {}

    def migrations(self) -> list[str]:
        """The app's migrations after the previous release's, in order."""
        loader = MigrationLoader(None, ignore_no_migrations=True)
        names = sorted(name for app, name in loader.disk_migrations if app == APP)
        return names[names.index(PREVIOUS_RELEASE[1]) + 1 :]

    def run(self) -> list[Step]:
        with self.database.created(keep=self.options.keep, migrate_to=PREVIOUS_RELEASE[1]):
            self.server = self.database.server_facts()
            self._load()
            steps = []
            with Load(self.database.conninfo(), self.options) as load:
                time.sleep(self.options.settle)
                began = time.monotonic()
                time.sleep(self.options.settle)
                steps.append(self._step("(before migrate: the load alone)", began, time.monotonic(), load))
                for migration in self.migrations():
                    began = time.monotonic()
                    call_command("migrate", APP, migration, database=self.database.alias, verbosity=0)
                    steps.append(self._step(migration, began, time.monotonic(), load))
                    self.say(f"{migration}: {steps[-1].seconds:.1f}s")
                began = time.monotonic()
                time.sleep(self.options.settle)
                steps.append(self._step("(after migrate: the load alone)", began, time.monotonic(), load))
            return steps

    def _load(self) -> None:
        rows = self.options.rows
        started = time.monotonic()
        for first in range(1, rows + 1, LOAD_BATCH):
            last = min(rows, first + LOAD_BATCH - 1)
            self.database.execute(LOAD, {"first": first, "last": last, "rows": rows})
            self.say(f"loaded {last:,} of {rows:,} finished runs ({time.monotonic() - started:.0f}s)")
        self.database.execute("VACUUM (ANALYZE) workflows, workflow_steps")
        with contextlib.suppress(psycopg.Error):  # a server whose user may not: the figures stand without it
            self.database.execute("CHECKPOINT")
        self.say(f"vacuumed and analyzed ({time.monotonic() - started:.0f}s); migrating under load")

    def _step(self, name: str, began: float, ended: float, load: Load) -> Step:
        return Step(
            migration=name,
            seconds=ended - began,
            longest={kind: load.timed[kind].longest(began, ended) for kind in KINDS},
            made={kind: load.timed[kind].count(began, ended) for kind in KINDS},
            failed=sum(len(load.timed[kind].failed(began, ended)) for kind in KINDS),
            errors=sorted({error for kind in KINDS for error in load.timed[kind].failed(began, ended)}),
        )


def render(steps: list[Step], options: Options, server: dict[str, str], json_only: bool = False) -> str:
    configuration = {
        "previous_release": PREVIOUS_RELEASE[0],
        "rows": options.rows,
        "start_rate": options.start_rate,
        "claim_rate": options.claim_rate,
        **server,
    }
    lines = [json.dumps({"configuration": configuration}), *(step.as_json() for step in steps)]
    if json_only:
        return "\n".join(lines) + "\n"
    width = max(len(step.migration) for step in steps)
    table = [
        f"orchestration upgrade benchmark: from {PREVIOUS_RELEASE[0]}'s schema with {options.rows:,} finished runs "
        f"(a step each), {options.start_rate:g} starts/s and {options.claim_rate:g} claims/s beside migrate",
        f"PostgreSQL {server.get('server_version')}, {server.get('cpus')} CPUs",
        "",
        f"{'migration':<{width}}  {'seconds':>8}  {'longest start':>13}  {'longest claim':>13}  "
        f"{'longest checkpoint':>18}  failed",
    ]
    for step in steps:
        table.append(
            f"{step.migration:<{width}}  {step.seconds:>8.2f}  {step.longest['start']:>12.3f}s  "
            f"{step.longest['claim']:>12.3f}s  {step.longest['checkpoint']:>17.3f}s  {step.failed}"
        )
        table += [f"    {error}" for error in step.errors[:3]]
    total = sum(step.seconds for step in steps if not step.migration.startswith("("))
    table += ["", f"migrate in all: {total:.1f}s"]
    return "\n".join([*table, "", *lines]) + "\n"

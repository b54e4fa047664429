"""A rolling upgrade from the previous release to this one, as a team deploys it,
under a steady stream of starts (real processes of both releases, one database):

1. the previous release's workers and producer run on its schema;
2. this release's ``migrate`` runs while they keep working;
3. this release's workers join, the producer moves to this release;
4. the previous release's workers are stopped (SIGTERM) or killed (SIGKILL).

Every run completes, no start is refused or stalls for more than a second
during ``migrate``, and no step body runs again after its checkpoint.
The previous release is the one ``.ci/previous-release`` records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import psycopg
import pytest
from django.db import connection
from psycopg.sql import SQL, Identifier

from project.benchmark.upgrade import PREVIOUS_RELEASE
from tests.acceptance.chaos_driver import CHECKS
from tests.acceptance.previous_release import Release, installed
from tests.support import ROOT, WorkerProcess, database_conninfo, start_workers, worker_env

pytestmark = pytest.mark.upgrade
T = TypeVar("T")

RATE = 50  # starts a second
PRODUCER = ROOT / "tests" / "acceptance" / "upgrade_producer.py"
# Both releases' workers: a quick heartbeat and stuck sweep (for the SIGKILLed
# workers' runs), and retries a second or two apart, so that runs are mid-retry.
WORKER_SETTINGS = {
    "ORCHESTRATION_STUCK_AFTER": "4",
    "ORCHESTRATION_HEARTBEAT_INTERVAL": "0.5",
    "ORCHESTRATION_POLL_INTERVAL": "0.2",
    "ORCHESTRATION_RETRY_BACKOFF": "1",
    "ORCHESTRATION_RETRY_BACKOFF_MAX": "2",
    "ORCHESTRATION_SHUTDOWN_GRACE": "10",
}
# What must be under way when ``migrate`` begins, each a count over the runs.
UNDER_WAY = {
    "running": "status = 'running'",
    "on a timer": "workflow_type = 'sleeper' AND status = 'pending' AND current_step >= 1",
    "waiting for an event": "workflow_type = 'awaits_approval' AND status = 'pending' AND waiting_for IS NOT NULL",
    "mid-retry": "workflow_type = 'flaky' AND status = 'pending' AND attempts >= 1",
}


class Upgrade:
    """One database, and the processes of the two releases on it."""

    def __init__(self, database: str, previous: Release, logs: Path) -> None:
        self.database = database
        self.previous = previous
        self.logs = logs
        self.env = worker_env(DATABASE_URL=server_url(), DATABASE_NAME=database, **WORKER_SETTINGS)
        self.workers: list[WorkerProcess] = []
        self.producers: list[subprocess.Popen[bytes]] = []

    def manage(self, release: Release | None, *args: str) -> subprocess.CompletedProcess[str]:
        python, root, env = self.interpreter(release)
        command = [str(python), str(root / "manage.py"), *args]
        return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)

    def start_workers(self, release: Release | None) -> WorkerProcess:
        python, root, env = self.interpreter(release)
        process = start_workers("--concurrency", "4", env=env, python=python, root=root)
        self.workers.append(process)
        return process

    def start_producer(self, release: Release | None, name: str) -> subprocess.Popen[bytes]:
        python, root, env = self.interpreter(release)
        with open(self.logs / f"{name}.jsonl", "wb") as out, open(self.logs / f"{name}.err", "wb") as err:
            command = [str(python), str(PRODUCER), str(RATE)]
            process = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=err)
        self.producers.append(process)
        return process

    def interpreter(self, release: Release | None) -> tuple[str, Path, dict[str, str]]:
        if release is None:
            return sys.executable, ROOT, {**self.env, "PYTHONPATH": str(ROOT)}
        return str(release.python), release.root, release.env(self.env)

    def scalar(self, sql: str, params: Any = None) -> Any:
        with psycopg.connect(database_conninfo(dbname=self.database), autocommit=True) as db:
            row = db.execute(sql, params).fetchone()
            return row[0] if row else None

    def count(self, where: str, params: Any = None) -> int:
        return int(self.scalar(f"SELECT count(*) FROM workflows WHERE {where}", params))

    def stop_everything(self) -> None:
        for process in [*self.producers, *self.workers]:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def server_url() -> str:
    """A DATABASE_URL for both releases' settings: the server the tests use."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    params = connection.get_connection_params()  # the embedded server: a socket directory
    host = quote(str(params.get("host", "")), safe="")
    return f"postgres://{params.get('user', 'postgres')}@{host}:{params.get('port', 5432)}/postgres"


def until(measure: Callable[[], T], done: Callable[[T], bool], timeout: float = 60) -> T:
    """``measure()`` once ``done`` with it (or as it stands at ``timeout``; the assertions tell)."""
    deadline = time.monotonic() + timeout
    while not done(value := measure()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def all_positive(counts: dict[str, int]) -> bool:
    return all(count > 0 for count in counts.values())


def starts(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def previous() -> Release:
    return installed()


@pytest.fixture
def upgrade(previous: Release, tmp_path: Path) -> Iterator[Upgrade]:
    base = os.environ.get("TEST_DATABASE_NAME") or f"test_{connection.settings_dict['NAME']}"
    database = f"{base}_upgrade"
    with psycopg.connect(database_conninfo(dbname="postgres"), autocommit=True) as admin:
        admin.execute(SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(database)))
        admin.execute(SQL("CREATE DATABASE {}").format(Identifier(database)))
    roll = Upgrade(database, previous, tmp_path)
    try:
        yield roll
    finally:
        roll.stop_everything()
        with psycopg.connect(database_conninfo(dbname="postgres"), autocommit=True) as admin:
            admin.execute(SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(database)))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_rolling_upgrade__from_the_previous_release_under_50_starts_a_second__nothing_refused_lost_or_run_twice(
    upgrade: Upgrade, previous: Release, stop_signal: signal.Signals, capsys: pytest.CaptureFixture[str]
) -> None:
    made = upgrade.manage(previous, "migrate", "--run-syncdb", "--verbosity", "0")
    assert made.returncode == 0, made.stderr
    old_workers = [upgrade.start_workers(previous) for _ in range(2)]
    old_producer = upgrade.start_producer(previous, "previous-producer")
    # The previous release alone, until it has runs in flight, on timers, waiting and mid-retry.
    under_way = until(lambda: {name: upgrade.count(where) for name, where in UNDER_WAY.items()}, all_positive)
    time.sleep(2)

    migrate_began = time.time()
    migrated = upgrade.manage(None, "migrate", "--verbosity", "1")
    migrate_ended = time.time()
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    new_workers = [upgrade.start_workers(None) for _ in range(2)]
    new_pids = [process.pid for process in new_workers]
    until(lambda: upgrade.scalar("SELECT count(*) FROM testapp_steprun WHERE pid = ANY(%s)", [new_pids]), bool)
    new_producer = upgrade.start_producer(None, "producer")
    until(lambda: len(starts(upgrade.logs / "producer.jsonl")), bool)
    old_producer.send_signal(signal.SIGTERM)
    assert old_producer.wait(timeout=30) == 0, (upgrade.logs / "previous-producer.err").read_text()
    time.sleep(1)
    old_pids = [str(process.pid) for process in old_workers]
    # The previous release's workers on the new schema: bodies they ran after migrate,
    # of runs this release started among them.
    old_ran_after_migrate = upgrade.scalar(
        "SELECT count(*) FROM testapp_steprun WHERE pid = ANY(%s) AND created_at > to_timestamp(%s)",
        [[int(pid) for pid in old_pids], migrate_ended],
    )
    new_ids = [start["id"] for start in starts(upgrade.logs / "producer.jsonl") if "id" in start]
    old_ran_new_starts = upgrade.scalar(
        "SELECT count(DISTINCT workflow_id) FROM testapp_steprun WHERE pid = ANY(%s) AND workflow_id::text = ANY(%s)",
        [[int(pid) for pid in old_pids], new_ids],
    )
    held_by_old = until(
        lambda: upgrade.count("status = 'running' AND split_part(worker_id, ':', 2) = ANY(%s)", [old_pids]), bool
    )
    for process in old_workers:
        process.send_signal(stop_signal)
    old_exits = [process.wait(timeout=30) for process in old_workers]
    time.sleep(4)
    new_producer.send_signal(signal.SIGTERM)
    assert new_producer.wait(timeout=30) == 0, (upgrade.logs / "producer.err").read_text()

    deadline = time.monotonic() + 120
    while upgrade.count("status <> 'completed'") and time.monotonic() < deadline:
        time.sleep(0.5)
    for process in new_workers:
        process.send_signal(signal.SIGTERM)
    new_exits = [process.wait(timeout=30) for process in new_workers]

    old_starts = starts(upgrade.logs / "previous-producer.jsonl")
    new_starts = starts(upgrade.logs / "producer.jsonl")
    during_migrate = [s for s in old_starts if migrate_began <= s["at"] <= migrate_ended]
    refused = [s for s in old_starts + new_starts if "error" in s]  # a start, or an event sent to a run
    accepted = [s["id"] for s in old_starts + new_starts if "id" in s]
    results = {name: int(upgrade.scalar(sql)) for name, sql in CHECKS.items()}
    unfinished = upgrade.scalar(
        "SELECT json_agg(json_build_object('type', workflow_type, 'status', status, 'attempts', attempts, "
        "'error', left(error_message, 300))) FROM workflows WHERE status <> 'completed'"
    )
    slowest = max((start["seconds"] for start in during_migrate), default=0.0)
    with capsys.disabled():  # the figures belong in CI's log, pass or fail
        print(
            f"\nupgrade ({stop_signal.name}): {previous.version} -> main; under way at migrate {under_way}; "
            f"migrate {migrate_ended - migrate_began:.1f}s, {len(during_migrate)} starts during it, slowest "
            f"{slowest:.3f}s; {len(old_starts)} + {len(new_starts)} starts, {len(refused)} refused; "
            f"previous workers: {old_ran_after_migrate} bodies run after migrate, of {old_ran_new_starts} runs "
            f"this release started, {held_by_old} runs held at the signal; exits {old_exits} {new_exits}; "
            f"not completed {unfinished}; {results}"
        )
    assert not refused, refused[:3]
    assert all_positive(under_way), under_way
    assert during_migrate and slowest <= 1.0
    assert results["completed"] == results["workflows"] == len(set(accepted)), unfinished
    assert results["steps with more than one row"] == results["bodies run after their checkpoint"] == 0
    assert old_ran_after_migrate > 0 and held_by_old > 0
    assert old_exits == ([0, 0] if stop_signal == signal.SIGTERM else [-signal.SIGKILL] * 2)
    assert new_exits == [0, 0]


def test_the_previous_release_is_recorded_alike_by_the_upgrade_benchmark_and_the_migration_lint(previous: Release):
    migrations = sorted(path.name for path in (previous.root / "orchestration" / "migrations").glob("0*.py"))
    assert (previous.version, migrations[-1]) == (PREVIOUS_RELEASE[0], f"{PREVIOUS_RELEASE[1]}.py")
    lint = tomllib.loads((ROOT / ".ci" / "migration-lint.toml").read_text())
    assert int(lint["first"]) == int(migrations[-1][:4]) + 1

"""``migrate`` on a database that is not PostgreSQL: refused before anything
is written, even with ``--skip-checks``, unless the app's tables are routed
to a PostgreSQL database of their own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support import run_manage, worker_env


def migrate_on_sqlite(path: Path, **env: str) -> tuple[int, str]:
    settings = worker_env(DJANGO_SETTINGS_MODULE="tests.sqlite_settings", SQLITE_PATH=str(path), **env)
    result = run_manage("migrate", "--skip-checks", env=settings)
    return result.returncode, result.stderr


def tables_in(path: Path) -> list[str]:
    with sqlite3.connect(path) as database:
        return [name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def test_migrate__with_skip_checks_on_sqlite_is_refused_before_anything_is_written(tmp_path):
    database = tmp_path / "db.sqlite3"
    returncode, stderr = migrate_on_sqlite(database)
    assert returncode == 1
    assert "orchestration's tables need PostgreSQL, and the database 'default' is sqlite" in stderr
    assert "nothing was migrated" in stderr and "Traceback" not in stderr
    assert tables_in(database) == []  # not even django_migrations


def test_migrate__on_sqlite_migrates_the_rest_when_the_apps_tables_are_routed_to_postgresql(tmp_path):
    database = tmp_path / "db.sqlite3"
    returncode, stderr = migrate_on_sqlite(database, QUEUE_ON_POSTGRESQL="1")
    assert returncode == 0, stderr
    assert "auth_user" in tables_in(database) and "workflows" not in tables_in(database)

"""The migration operations of ``orchestration.online_migrations``, on a table
of their own that another connection locks and writes as a serving release would."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection, migrations, models
from django.db.migrations.state import ProjectState

from orchestration import online_migrations
from orchestration.online_migrations import AddField, CreateIndexConcurrently, DropIndexConcurrently, WithLockTimeout
from tests.support import other_connection

pytestmark = pytest.mark.django_db(transaction=True)  # the operations make their own transactions

TABLE = "online_migration_probe"


@pytest.fixture
def probe() -> Iterator[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TABLE} (id integer)")
    yield TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")


def run_forwards(operation: migrations.operations.base.Operation, atomic: bool = False) -> None:
    with connection.schema_editor(atomic=atomic) as editor:
        operation.database_forwards("orchestration", editor, ProjectState(), ProjectState())


def held_for(seconds: float) -> threading.Thread:
    """Another connection reading the probe in a transaction open for ``seconds``:
    its lock keeps any ALTER TABLE waiting."""
    started = threading.Event()

    def hold() -> None:
        with other_connection(autocommit=False) as other:
            other.execute(f"SELECT * FROM {TABLE}")
            started.set()
            time.sleep(seconds)
            other.rollback()

    holder = threading.Thread(target=hold)
    holder.start()
    started.wait(5)
    return holder


def columns() -> list[str]:
    with connection.cursor() as cursor:
        return [column.name for column in connection.introspection.get_table_description(cursor, TABLE)]


def test_with_lock_timeout__tries_again_until_its_lock_is_granted(probe):
    holder = held_for(1.5)
    began = time.monotonic()
    run_forwards(WithLockTimeout(migrations.RunSQL(f"ALTER TABLE {TABLE} ADD COLUMN added integer")))
    holder.join()
    assert "added" in columns() and time.monotonic() - began >= 1.0


def test_with_lock_timeout__tries_again_in_an_atomic_migration(probe):
    holder = held_for(1.0)
    run_forwards(WithLockTimeout(migrations.RunSQL(f"ALTER TABLE {TABLE} ADD COLUMN added integer")), atomic=True)
    holder.join()
    assert "added" in columns()


def test_with_lock_timeout__fails_once_its_attempts_are_spent(probe, monkeypatch):
    monkeypatch.setattr(online_migrations, "ATTEMPTS", 2)
    holder = held_for(3)
    with pytest.raises(OperationalError) as failure:
        run_forwards(WithLockTimeout(migrations.RunSQL(f"ALTER TABLE {TABLE} ADD COLUMN added integer")))
    holder.join()
    assert online_migrations.lock_not_available(failure.value) and "added" not in columns()


def test_with_lock_timeout__writes_wait_no_longer_than_its_lock_timeout(probe):
    """A write that comes while the ALTER waits for its lock queues behind it, but
    only until the lock timeout ends that wait (without one: until the holder ends)."""
    holder = held_for(3)
    alter = threading.Thread(
        target=run_forwards, args=[WithLockTimeout(migrations.RunSQL(f"ALTER TABLE {TABLE} ADD COLUMN added integer"))]
    )
    alter.start()
    time.sleep(0.1)  # the ALTER waits for its lock now
    with other_connection() as writer:
        began = time.monotonic()
        writer.execute(f"INSERT INTO {TABLE} (id) VALUES (1)")
        waited = time.monotonic() - began
    holder.join()
    alter.join()
    assert waited < 1.0 and "added" in columns()


def test_with_lock_timeout__runs_what_its_operations_defer_in_its_transaction(probe):
    index = "online_migration_probe_2_index"
    create = migrations.CreateModel(
        "Probe2",
        [("id", models.IntegerField(primary_key=True))],
        options={"db_table": f"{TABLE}_2", "indexes": [models.Index(fields=["id"], name=index)]},
    )
    with connection.schema_editor(atomic=False) as editor:
        state = ProjectState()
        after = state.clone()
        WithLockTimeout(create).state_forwards("orchestration", after)
        WithLockTimeout(create).database_forwards("orchestration", editor, state, after)
        assert editor.deferred_sql == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [index])
        built = cursor.fetchone()[0]
        cursor.execute(f"DROP TABLE {TABLE}_2")
    assert built


def index_valid(name: str) -> bool | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        row = cursor.fetchone()
    return None if row is None else row[0]


def test_create_index_concurrently__builds_again_an_index_a_failed_build_left_invalid(probe):
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} VALUES (1), (1)")
        with pytest.raises(Exception, match="could not create unique index"):
            cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY probe_unique ON {TABLE} (id)")
        assert index_valid("probe_unique") is False
        cursor.execute(f"DELETE FROM {TABLE}")
    run_forwards(
        CreateIndexConcurrently(
            "probe_unique", f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS probe_unique ON {TABLE} (id)"
        )
    )
    assert index_valid("probe_unique") is True


def test_create_index_concurrently__refuses_a_build_that_is_not_concurrent():
    with pytest.raises(ValueError, match="CONCURRENTLY IF NOT EXISTS"):
        CreateIndexConcurrently("probe_index", f"CREATE INDEX probe_index ON {TABLE} (id)")


def test_drop_index_concurrently__leaves_the_session_without_timeouts(probe):
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX probe_index ON {TABLE} (id)")
    run_forwards(
        DropIndexConcurrently("probe_index", f"CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_index ON {TABLE} (id)")
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        assert cursor.fetchone() == ("0", "0")
    assert index_valid("probe_index") is None


def test_add_field__skips_a_column_already_there(probe):
    """A non-atomic migration that stopped after adding its column runs again."""
    state = ProjectState()
    table = migrations.CreateModel("Probe", [("id", models.IntegerField(primary_key=True))], {"db_table": TABLE})
    table.state_forwards("orchestration", state)
    add = AddField("probe", "added", models.IntegerField(null=True))
    after = state.clone()
    add.state_forwards("orchestration", after)
    for _ in range(2):
        with connection.schema_editor(atomic=False) as editor:
            add.database_forwards("orchestration", editor, state, after)
    assert columns().count("added") == 1

"""The console: every attempt's error kept (``error_history``), and the two
indexes its search reads.

- ``idx_workflows_id_tail``: the last characters of an id, reversed, so that
  the end of an id (the random part of a UUIDv7, which the list shows) is a
  prefix a LIKE can seek (Django renders this operator class inside
  parentheses, which PostgreSQL refuses);
- ``idx_workflows_error_trgm``: pg_trgm's GIN index on the error message, for
  a search of any part of it (Django declares a GIN index only with
  ``django.contrib.postgres`` installed). ``pg_trgm`` ships with PostgreSQL
  (not with every embedded build) and is a trusted extension, which a
  database's owner may create; where it is missing, or this role may not
  create it, the index is left out and so is the search in error messages.

Adding a nullable column rewrites no row, and its lock is held for a moment;
both indexes are built CONCURRENTLY, so a large table keeps taking writes
meanwhile (hence not atomic).
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, migrations, models

from orchestration.online_migrations import AddField, CreateIndexConcurrently, WithLockTimeout, drop_if_invalid


ERROR_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_error_trgm ON workflows "
    "USING gin (UPPER(error_message) gin_trgm_ops) WHERE error_message IS NOT NULL"
)

ERROR_STATISTICS = "CREATE STATISTICS IF NOT EXISTS workflows_error_upper ON (UPPER(error_message)) FROM workflows"


def create_error_index(apps: Any, schema_editor: Any) -> None:
    """The error index where the server has pg_trgm and lets this role create it;
    elsewhere the console's search leaves error messages out (``listing.search_q``)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        if cursor.fetchone() is None:
            return
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        except DatabaseError:  # not the database's owner, nor a superuser
            return
    drop_if_invalid(schema_editor, "idx_workflows_error_trgm")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(ERROR_INDEX)
        # The planner's figures for the indexed expression (mostly NULL: only failed,
        # retrying or cancelled runs have an error), without which it takes a search
        # in errors to match 1 row in 200 and walks the table by date instead.
        cursor.execute(ERROR_STATISTICS)


def drop_error_index(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP STATISTICS IF EXISTS workflows_error_upper")
    schema_editor.execute("DROP INDEX CONCURRENTLY IF EXISTS idx_workflows_error_trgm")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0010_results_awaited"),
    ]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="error_history",
                field=models.JSONField(blank=True, null=True),
            ),
        ),
        CreateIndexConcurrently(
            "idx_workflows_id_tail",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_id_tail ON workflows "
            "(reverse(right(id::text, 12)) text_pattern_ops)",
        ),
        migrations.RunPython(create_error_index, drop_error_index),
    ]

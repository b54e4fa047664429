"""The console: every attempt's error kept (``error_history``), and the two
indexes its search reads.

- ``idx_workflows_id_tail``: the last characters of an id, reversed, so that
  the end of an id (the random part of a UUIDv7, which the list shows) is a
  prefix a LIKE can seek (Django renders this operator class inside
  parentheses, which PostgreSQL refuses);
- ``idx_workflows_error_trgm``: pg_trgm's GIN index on the error message, for
  a search of any part of it (Django declares a GIN index only with
  ``django.contrib.postgres`` installed). ``pg_trgm`` ships with PostgreSQL
  and is a trusted extension, which a database's owner may create.

Adding a nullable column rewrites no row; both indexes are built CONCURRENTLY,
so a large table keeps taking writes meanwhile (hence not atomic).
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0008_flow_control"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="error_history",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_id_tail ON workflows "
            "(reverse(right(id::text, 12)) text_pattern_ops)",
            "DROP INDEX CONCURRENTLY IF EXISTS idx_workflows_id_tail",
        ),
        migrations.RunSQL("CREATE EXTENSION IF NOT EXISTS pg_trgm", migrations.RunSQL.noop),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_error_trgm ON workflows "
            "USING gin (UPPER(error_message) gin_trgm_ops) WHERE error_message IS NOT NULL",
            "DROP INDEX CONCURRENTLY IF EXISTS idx_workflows_error_trgm",
        ),
    ]

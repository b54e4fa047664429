"""``workflows.tags``: the labels a run was started with (a JSON array of
strings), and ``idx_workflows_tags``, the GIN index of ``tags @>``
(``Workflow.objects.filter(tags__contains=[...])``).

The column is nullable with no default (no rewrite; the table's lock for a
moment, ``WithLockTimeout``); a run started without tags keeps NULL, so the
index, partial on ``tags IS NOT NULL``, holds tagged runs only and an
untagged start pays nothing for it. ``jsonb_path_ops``: the smaller GIN of
jsonb, which answers ``@>`` only, the one operator the filter uses. The index
is built CONCURRENTLY (writes go on meanwhile) in this non-atomic migration,
which runs again from its start if it stopped part way (``online_migrations``).
Django's state does not know the index (``GinIndex`` needs
``django.contrib.postgres`` installed).
"""

from django.db import migrations, models

from orchestration.online_migrations import AddField, CreateIndexConcurrently, WithLockTimeout


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0027_workflows_progress"),
    ]

    operations = [
        WithLockTimeout(
            AddField(
                model_name="workflow",
                name="tags",
                field=models.JSONField(blank=True, null=True),
            ),
        ),
        CreateIndexConcurrently(
            "idx_workflows_tags",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_workflows_tags ON workflows "
            "USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL",
        ),
    ]

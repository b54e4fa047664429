"""``workflow_tags``: a row per tag of a run, ``(tag, created_at, workflow_id)``
its primary key, so that the admin's and the console's tag filter read a tag's
runs newest first from one btree (``models.tagged_q``) instead of every tagged
run from the GIN index, which gives no order.

Triggers on ``workflows`` keep it, whoever writes the run (``start_workflow``,
plain SQL, the purge): an insert of a tagged run adds its rows, a change of
``tags`` or ``created_at`` writes them again, a delete removes them. Each
fires only for a tagged run (its WHEN test), so an untagged start pays for the
test alone. Only the strings of an array are tags (as ``validate_tags``
stores them): a value written by SQL that is not one is left out rather than
refusing the run.

The table is new; the triggers take ``SHARE ROW EXCLUSIVE`` on ``workflows``
for a moment (``WithLockTimeout``). The runs tagged before them are copied
after (``backfill``): 20,000 runs a transaction in the order of their ids,
outside the migration's transaction (it is not atomic), so that writes go on;
a run written meanwhile is already copied by its trigger (``ON CONFLICT DO
NOTHING``). It runs again from its start if it stopped part way."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models, transaction

from orchestration.online_migrations import WithLockTimeout, applies

#: The strings of a run's tags, each once.
_TAGS = (
    "SELECT DISTINCT e.value #>> '{{}}' FROM jsonb_array_elements(CASE WHEN jsonb_typeof({tags}) = 'array' "
    "THEN {tags} END) AS e (value) WHERE jsonb_typeof(e.value) = 'string'"
)

KEEP_TAGS = f"""
CREATE OR REPLACE FUNCTION orchestration_keep_tags() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.tags IS NOT NULL THEN
        DELETE FROM workflow_tags
        WHERE tag IN ({_TAGS.format(tags="OLD.tags")}) AND created_at = OLD.created_at AND workflow_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.tags IS NOT NULL THEN
        INSERT INTO workflow_tags (tag, created_at, workflow_id)
        SELECT tag, NEW.created_at, NEW.id FROM ({_TAGS.format(tags="NEW.tags")}) AS t (tag)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_tags_inserted AFTER INSERT ON workflows
FOR EACH ROW WHEN (NEW.tags IS NOT NULL) EXECUTE FUNCTION orchestration_keep_tags();
CREATE TRIGGER workflows_tags_changed AFTER UPDATE OF tags, created_at ON workflows
FOR EACH ROW WHEN ((OLD.tags IS NOT NULL OR NEW.tags IS NOT NULL)
                   AND (OLD.tags IS DISTINCT FROM NEW.tags OR OLD.created_at IS DISTINCT FROM NEW.created_at))
EXECUTE FUNCTION orchestration_keep_tags();
CREATE TRIGGER workflows_tags_deleted AFTER DELETE ON workflows
FOR EACH ROW WHEN (OLD.tags IS NOT NULL) EXECUTE FUNCTION orchestration_keep_tags();
"""

DROP_KEEP_TAGS = """
DROP TRIGGER workflows_tags_inserted ON workflows;
DROP TRIGGER workflows_tags_changed ON workflows;
DROP TRIGGER workflows_tags_deleted ON workflows;
DROP FUNCTION orchestration_keep_tags();
"""

#: Runs read by one transaction of the backfill.
BATCH = 20_000

#: Copies the tags of the next ``BATCH`` runs after ``%(after)s`` (by id); returns the last id read.
BACKFILL = f"""
WITH batch AS (
    SELECT id, created_at, tags FROM workflows WHERE id > %(after)s ORDER BY id LIMIT {BATCH}
), copied AS (
    INSERT INTO workflow_tags (tag, created_at, workflow_id)
    SELECT t.tag, batch.created_at, batch.id
    FROM batch, LATERAL ({_TAGS.format(tags="batch.tags")}) AS t (tag)
    WHERE batch.tags IS NOT NULL
    ON CONFLICT DO NOTHING
)
SELECT max(id::text) FROM batch
"""


def backfill(apps: Any, schema_editor: Any) -> None:
    """The tags of the runs written before the triggers, a batch a transaction."""
    if not applies(schema_editor, "orchestration"):
        return
    after = "00000000-0000-0000-0000-000000000000"
    while after is not None:
        with transaction.atomic(using=schema_editor.connection.alias), schema_editor.connection.cursor() as cursor:
            cursor.execute(BACKFILL, {"after": after})
            after = cursor.fetchone()[0]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orchestration", "0033_paused_runs_hold_their_keys"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowTag",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "tag", "created_at", "workflow", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("tag", models.TextField()),
                ("created_at", models.DateTimeField()),
                (
                    "workflow",
                    models.ForeignKey(
                        db_column="workflow_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.DO_NOTHING,
                        related_name="tag_rows",
                        to="orchestration.workflow",
                    ),
                ),
            ],
            options={"db_table": "workflow_tags"},
        ),
        WithLockTimeout(migrations.RunSQL(KEEP_TAGS, DROP_KEEP_TAGS)),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]

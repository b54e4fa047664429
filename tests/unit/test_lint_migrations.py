"""The migration lint's exemption of statements on tables their migration creates."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / ".ci" / "lint_migrations.py"
_SPEC = importlib.util.spec_from_file_location("lint_migrations", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
lint_migrations = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(lint_migrations)

SQL = """BEGIN;
CREATE TABLE "workflow_probe" ("id" bigint NOT NULL PRIMARY KEY, "workflow_id" uuid NULL);
CREATE INDEX "idx_probe" ON "workflow_probe" ("workflow_id");
ALTER TABLE "workflow_probe" ADD CONSTRAINT "probe_fk" FOREIGN KEY ("workflow_id") REFERENCES "workflows" ("id");
CREATE INDEX "idx_busy" ON "workflows" ("queue");
COMMIT;
"""


def warning_on(line: int) -> dict:
    return {"line": line, "line_end": line, "rule_name": "require-lock-timeout"}


@pytest.mark.parametrize(
    ("line", "exempt"),
    [
        (1, True),  # the new table
        (2, True),  # an index of the new table
        (3, False),  # its foreign key locks workflows too
        (4, False),  # an index of a table the migration did not create
    ],
)
def test_on_new_tables_only__exempts_what_touches_no_other_table(line, exempt):
    assert lint_migrations.on_new_tables_only(SQL, warning_on(line)) is exempt

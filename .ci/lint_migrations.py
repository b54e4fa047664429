"""``make lint-migrations``: the SQL of every migration since the previous
release (``manage.py sqlmigrate``), linted by squawk for statements that would
hold a lock on a busy table while the previous release serves.

The rules left out, and each statement's exception, are in
.ci/migration-lint.toml, each with its reason. A statement on tables created
in the same migration only is exempt: nothing else reads or writes them yet.
An exception that no longer matches anything fails the lint too, so that the
list stays true.

Run with the project's virtualenv (squawk-cli from requirements-lint.txt); the
database is the example project's (DATABASE_URL, else the embedded one).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".ci" / "migration-lint.toml"
APP = "orchestration"

#: Tables a statement names: what it creates, alters, indexes or references.
_CREATED = re.compile(r'CREATE TABLE (?:IF NOT EXISTS )?"?(\w+)"?', re.IGNORECASE)
_NAMED = re.compile(r'(?:ALTER TABLE|ON|REFERENCES|TABLE)\s+(?:ONLY\s+)?"?(\w+)"?', re.IGNORECASE)


def main() -> int:
    config = tomllib.loads(CONFIG.read_text())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command
    from django.db.migrations.loader import MigrationLoader

    django.setup()
    names = sorted(name for app, name in MigrationLoader(None).disk_migrations if app == APP)
    linted = [name for name in names if name[:4] >= config["first"]]
    exceptions = {(entry["migration"], entry["rule"]): entry["reason"] for entry in config.get("exceptions", [])}
    used: set[tuple[str, str]] = set()
    found = []
    with tempfile.TemporaryDirectory(prefix="lint-migrations-") as folder:
        for name in linted:
            sql = io.StringIO()
            call_command("sqlmigrate", APP, name, stdout=sql)
            path = Path(folder) / f"{name}.sql"
            path.write_text(sql.getvalue())
            for warning in squawk(path, config):
                number, rule = name[:4], warning["rule_name"]
                if on_new_tables_only(sql.getvalue(), warning):
                    continue
                if (number, rule) in exceptions:
                    used.add((number, rule))
                    continue
                found.append(f"{name}.sql:{warning['line'] + 1}: {rule}: {warning['message']}")
    for number, rule in sorted(exceptions.keys() - used):
        found.append(f"{CONFIG.name}: the exception of migration {number} to {rule} matches nothing: remove it")
    for line in found:
        print(line)
    print(f"{len(linted)} migrations linted ({linted[0]} to {linted[-1]}), {len(found)} problems", file=sys.stderr)
    return 1 if found else 0


def squawk(path: Path, config: dict) -> list[dict]:
    command = [str(Path(sys.executable).parent / "squawk"), f"--pg-version={config['pg_version']}", "--reporter=json"]
    if config.get("excluded_rules"):
        command.append("--exclude=" + ",".join(config["excluded_rules"]))
    result = subprocess.run([*command, str(path)], capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1) or not result.stdout.strip().startswith("["):
        raise SystemExit(f"squawk failed on {path.name}: {result.stderr or result.stdout}")
    return json.loads(result.stdout)


def on_new_tables_only(sql: str, warning: dict) -> bool:
    """Whether the statement warned about names only tables its migration creates."""
    lines = sql.splitlines()
    statement = "\n".join(lines[warning["line"] : warning.get("line_end", warning["line"]) + 1])
    created = {table.lower() for table in _CREATED.findall(sql)}
    named = {table.lower() for table in _NAMED.findall(statement)}
    return bool(named) and named <= created


if __name__ == "__main__":
    sys.exit(main())

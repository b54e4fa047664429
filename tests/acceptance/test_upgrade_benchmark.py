"""``manage.py benchmark_upgrade`` runs end to end (a small table: what is checked
is that every migration since the previous release is timed under the load and
nothing is left behind, not the figures)."""

from __future__ import annotations

import json

import pytest
from django.db.migrations.loader import MigrationLoader

from project.benchmark.upgrade import PREVIOUS_RELEASE
from tests.support import run_benchmark, scratch_databases

pytestmark = pytest.mark.django_db(transaction=True)


def test_benchmark_upgrade__times_every_migration_since_the_previous_release_under_starts_and_claims():
    result, worked_in = run_benchmark("benchmark_upgrade", "--rows", "3000", "--settle", "0.5")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    configuration, steps = lines[0]["configuration"], lines[1:]
    assert (configuration["previous_release"], configuration["rows"]) == ("0.1.0", 3000)
    since = sorted(name for app, name in MigrationLoader(None).disk_migrations if app == "orchestration")
    since = since[since.index(PREVIOUS_RELEASE[1]) + 1 :]
    timed = [step["migration"] for step in steps if not step["migration"].startswith("(")]
    assert timed == since and since[0].startswith("0006")
    for step in steps:
        assert step["seconds"] > 0 and step["failed"] == 0 and not step["errors"], step
    # The load ran beside migrate: starts and claims before it, and after it on the new schema.
    assert steps[0]["starts"] > 0 and steps[0]["claims"] > 0
    assert steps[-1]["starts"] > 0 and steps[-1]["claims"] > 0 and steps[-1]["checkpoints"] > 0
    assert worked_in and not worked_in & scratch_databases(), "its scratch database is dropped"

"""``manage.py benchmark_admin`` runs end to end on a small table (its 10-million
row figures are in docs/performance.md; what is checked here is that every page
and report answers, and that nothing is left behind)."""

from __future__ import annotations

import re

import pytest

from tests.support import run_benchmark, scratch_databases

pytestmark = pytest.mark.django_db(transaction=True)

SMALL = ("--rows", "5000", "--chunk", "2000", "--repeat", "1")


def test_benchmark_admin__times_every_page_and_report_and_drops_its_database():
    result, worked_in = run_benchmark("benchmark_admin", *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = re.findall(r"^\| (.+?) \| (\d+) \| (\d+) \| (\d+) \|$", result.stdout, re.M)
    pages = {page: status for page, _, _, status in rows}
    assert len(pages) >= 35, result.stdout
    assert set(pages.values()) == {"200"}, result.stdout  # no page cancelled (503) nor broken
    for page in ("list: newest first", "list: queue = reports (0.01 %)", "overview page", "workers page"):
        assert page in pages
    assert "Admin pages on 5,000 workflows" in result.stdout
    assert worked_in and not worked_in & scratch_databases(), "its scratch databases are dropped"

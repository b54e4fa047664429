"""A worker's row as ``orchestration.worker_rows`` writes it: the heartbeat
refreshes its abandoned step bodies in the one statement it already made, and
its restarts are written when the process registers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orchestration import worker_rows
from orchestration.models import WorkflowWorker

pytestmark = pytest.mark.django_db

WORKER = "host-a:41:cafe"


@pytest.fixture
def registered() -> Iterator[str]:
    worker_rows.register(WORKER, queues=None, concurrency=2, restarts=3)
    yield WORKER
    worker_rows.remove(WORKER)


def counts(worker_id: str) -> tuple[int, int]:
    row = WorkflowWorker.objects.get(pk=worker_id)
    return row.abandoned_bodies, row.restarts


def test_register__writes_the_restarts_so_far_and_no_abandoned_body(registered):
    assert counts(registered) == (0, 3)


def test_beat__writes_the_abandoned_bodies_in_its_one_statement(registered):
    with CaptureQueriesContext(connection) as queries:
        worker_rows.beat(registered, abandoned_bodies=2)
    assert len(queries) == 1
    assert counts(registered) == (2, 3)
    worker_rows.beat(registered, abandoned_bodies=1)  # one ended
    assert counts(registered) == (1, 3)


def test_beat__of_a_deleted_row__writes_it_again_with_both_counts(registered):
    WorkflowWorker.objects.filter(pk=registered).delete()
    worker_rows.beat(registered, abandoned_bodies=2)
    assert counts(registered) == (2, 3)


def test_a_row_inserted_without_the_counts__has_zero_of_each():
    # As the previous release's worker inserts it, naming neither column.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflow_workers (id, host, pid, concurrency, version) VALUES (%s, 'old', 1, 1, '0.1.0')",
            ["old:1:ab"],
        )
    assert counts("old:1:ab") == (0, 0)

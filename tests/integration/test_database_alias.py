"""``ORCHESTRATION["DATABASE"]``: every query of the engine goes to that alias."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import transaction
from django.test.utils import override_settings

from orchestration import cancel_workflow, start_workflow, start_workflows
from orchestration.claim import claims
from orchestration.models import Workflow, WorkflowStatus, WorkflowStep
from orchestration.reports.stats import success_rate
from orchestration.worker import execute

pytestmark = pytest.mark.django_db(databases=["default", "queue"], transaction=True)


@pytest.fixture(autouse=True)
def queue_alias() -> Iterator[None]:
    orchestration = {**settings.ORCHESTRATION, "DATABASE": "queue"}
    with override_settings(ORCHESTRATION=orchestration):
        yield


def counts(alias: str) -> tuple[int, int]:
    return Workflow.objects.using(alias).count(), WorkflowStep.objects.using(alias).count()


def test_the_engine__reads_and_writes_only_the_configured_alias():
    single = start_workflow("three_steps", idempotency_key="one")
    bulk = start_workflows("echo", [1, 2], idempotency_keys=["one-bulk", None])
    doomed = start_workflow("echo", "to cancel")
    cancel_workflow(doomed.pk)
    while runs := claims.claim("w", None, limit=2):
        assert [execute(run) for run in runs] == ["completed"] * len(runs)
    assert counts("default") == (0, 0)
    assert counts("queue") == (4, 5)
    statuses = dict(Workflow.objects.using("queue").values_list("pk", "status"))
    assert statuses[single.pk] == statuses[bulk[0].pk] == WorkflowStatus.COMPLETED
    assert statuses[doomed.pk] == WorkflowStatus.CANCELLED
    assert {row["workflow_type"] for row in success_rate(hours=1).as_dicts()} == {"three_steps", "echo"}


def test_transactional_enqueue__follows_the_queue_databases_transactions_only():
    with pytest.raises(RuntimeError), transaction.atomic(using="queue"):
        start_workflows("echo", [1])
        raise RuntimeError("roll back")
    assert counts("queue") == (0, 0)
    with pytest.raises(RuntimeError), transaction.atomic():  # the default database's
        start_workflow("echo", "kept")
        raise RuntimeError("roll back")
    assert counts("queue") == (1, 0)


def test_the_router__sends_the_apps_other_queries_to_the_alias_too():
    start_workflow("echo", "routed")
    with override_settings(DATABASE_ROUTERS=["orchestration.routers.OrchestrationRouter"]):
        assert Workflow.objects.count() == 1
        assert Workflow.objects.db == "queue"
    assert Workflow.objects.db == "default"

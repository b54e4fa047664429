"""New work announced by NOTIFY while threads idle: the process's listener
claims it for them at once, before any thread has woken, as they would have."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration import start_workflows, workflow
from orchestration.models import Workflow, WorkflowStatus
from orchestration.worker import Worker

pytestmark = pytest.mark.django_db


@workflow("announced_noop")
def noop(ctx: Any, data: Any) -> Any:
    return data


def claimed_count() -> int:
    return Workflow.objects.filter(status=WorkflowStatus.RUNNING).count()


def test_announced_runs__while_threads_idle__are_claimed_and_wait_for_them():
    start_workflows("announced_noop", range(2))
    dispatcher = Worker(concurrency=3).dispatcher
    dispatcher.claim_announced(2)
    assert len(dispatcher.waiting) == 2 and claimed_count() == 2


def test_announced_runs__more_than_the_idle_threads__claims_one_for_each_idle_thread():
    start_workflows("announced_noop", range(5))
    dispatcher = Worker(concurrency=3).dispatcher
    dispatcher.claim_announced(5)
    assert len(dispatcher.waiting) == 3 and claimed_count() == 3


def test_announced_run__while_a_run_waits_for_a_thread__is_left_to_the_threads():
    start_workflows("announced_noop", range(2))
    dispatcher = Worker(concurrency=3).dispatcher
    dispatcher.claim_announced(1)
    dispatcher.claim_announced(1)
    assert len(dispatcher.waiting) == 1 and claimed_count() == 1


def test_announced_run__while_the_worker_stops__is_not_claimed():
    start_workflows("announced_noop", range(1))
    worker = Worker(concurrency=3)
    worker.stopping.set()
    worker.dispatcher.claim_announced(1)
    assert not worker.dispatcher.waiting and claimed_count() == 0

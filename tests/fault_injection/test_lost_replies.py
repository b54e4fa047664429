"""A write whose COMMIT reached the database, but whose reply never came back,
is retried by the worker as an outage: the retry must find what the first try
did, not do it a second time.

The fault is real: right after the COMMIT of the worker's transaction that ran
a chosen statement, its server connection is terminated from another
connection, so the worker sees the error a dropped reply gives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import transaction
from django.db.backends.signals import connection_created

from orchestration import send_event, start_workflow, workflow
from orchestration.models import StepStatus, WorkflowStatus, WorkflowStep
from tests.fault_injection.test_checkpoint_through_outage import run_until_finished
from tests.support import other_connection
from tests.testapp.models import LedgerEntry

pytestmark = pytest.mark.django_db(transaction=True)


@workflow("fi_waits_once", max_retries=0)
def waits_once(ctx: Any, data: Any) -> Any:
    return ctx.wait_for_event("go")


@workflow("fi_waits_twice", max_retries=0)
def waits_twice(ctx: Any, data: Any) -> Any:
    return [ctx.wait_for_event("go"), ctx.wait_for_event("go")]


def terminate(connection: Any) -> None:
    """Kill ``connection``'s server process (waiting until it is gone), then use
    it: the error its next statement meets is what a lost reply gives."""
    pid = connection.connection.info.backend_pid
    with other_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@pytest.fixture
def reply_lost_after() -> Iterator[Callable[[str], None]]:
    """``reply_lost_after(text)``: the first transaction of a new connection
    that runs a statement containing ``text`` commits, then loses its connection."""
    armed: list[str] = []
    lost = threading.Event()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        result = execute(sql, params, many, context)
        if armed and armed[0] in sql and not lost.is_set():
            lost.set()
            connection = context["connection"]
            transaction.on_commit(lambda: terminate(connection), using=connection.alias)
        return result

    watched: list[Any] = []

    def watch(sender: Any, connection: Any, **kwargs: Any) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)
            watched.append(connection)

    connection_created.connect(watch)
    try:
        yield armed.append
    finally:
        connection_created.disconnect(watch)
        for connection in watched:  # a thread's connection object outlives the test (the main thread's does)
            connection.execute_wrappers.remove(wrapper)
    assert lost.is_set(), "no reply was lost: the statement never ran"


def test_take_event__retried_after_its_commits_reply_was_lost__returns_the_event_it_consumed(reply_lost_after):
    run = start_workflow("fi_waits_once")
    send_event(run.pk, "go", 1)
    reply_lost_after('UPDATE "workflow_events" SET "consumed_by_step"')
    run = run_until_finished(run, timeout=15)
    assert (run.status, run.output_data) == (WorkflowStatus.COMPLETED, 1)


def test_take_event__retried_after_its_commits_reply_was_lost__consumes_no_second_event(reply_lost_after):
    run = start_workflow("fi_waits_twice")
    send_event(run.pk, "go", 1)
    send_event(run.pk, "go", 2)
    reply_lost_after('UPDATE "workflow_events" SET "consumed_by_step"')
    run = run_until_finished(run, timeout=15)
    assert (run.status, run.output_data) == (WorkflowStatus.COMPLETED, [1, 2])


def test_atomic_step__retried_after_its_commits_reply_was_lost__is_not_run_again(reply_lost_after):
    reply_lost_after('INSERT INTO "testapp_ledgerentry"')
    run = run_until_finished(start_workflow("books_once", {"amount": 5}), timeout=15)
    assert (run.status, run.output_data, run.attempts) == (WorkflowStatus.COMPLETED, {"booked": 5}, 1)
    assert list(LedgerEntry.objects.filter(workflow_id=run.pk).values_list("amount", flat=True)) == [5]
    step = WorkflowStep.objects.get(workflow=run, step_number=1)
    assert (step.status, step.output_data) == (StepStatus.COMPLETED, {"booked": 5})

"""``start_workflow(..., unique_while_active=True)`` and ``debounce=``: starts of one
idempotency key collapsed into the run that holds it."""

import datetime

import pytest
from django.db import connection
from django.utils import timezone

from orchestration import (
    InvalidTransition,
    InvalidWorkflowInput,
    cancel_workflow,
    clock,
    pause_workflow,
    resume_workflow,
    retry_workflow,
    start_workflow,
)
from orchestration.models import Workflow
from orchestration.reports.listing import search_q
from tests.support import drain
from tests.testapp.workflows import echo

pytestmark = [pytest.mark.django_db, pytest.mark.moments]


def test_unique_while_active__a_start_while_the_keys_run_is_active_returns_that_run():
    first = start_workflow("echo", {"n": 1}, idempotency_key="report-7", unique_while_active=True)
    second = start_workflow("echo", {"n": 2}, idempotency_key="report-7", unique_while_active=True)
    assert (second.pk, second.input_data, second.key_scope) == (first.pk, {"n": 1}, "active")
    assert Workflow.objects.count() == 1


def test_unique_while_active__the_key_is_free_again_once_its_run_ended():
    first = start_workflow("echo", {"n": 1}, idempotency_key="report-7", unique_while_active=True)
    drain()
    second = start_workflow("echo", {"n": 2}, idempotency_key="report-7", unique_while_active=True)
    assert second.pk != first.pk and second.input_data == {"n": 2}
    assert Workflow.objects.get(pk=first.pk).status == "completed"


def test_unique_while_active__does_not_meet_the_same_key_used_for_ever():
    kept = start_workflow("echo", {"n": 1}, idempotency_key="report-7")
    unique = start_workflow("echo", {"n": 2}, idempotency_key="report-7", unique_while_active=True)
    assert unique.pk != kept.pk
    assert start_workflow("echo", {"n": 3}, idempotency_key="report-7").pk == kept.pk


def test_unique_while_active__retrying_a_run_while_another_of_its_key_is_active_is_refused():
    first = start_workflow("echo", {"n": 1}, idempotency_key="report-7", unique_while_active=True)
    cancel_workflow(first)
    start_workflow("echo", {"n": 2}, idempotency_key="report-7", unique_while_active=True)
    with pytest.raises(InvalidTransition, match="another run of its idempotency key"):
        retry_workflow(first)
    assert Workflow.objects.get(pk=first.pk).status == "cancelled"


def test_unique_while_active__a_paused_run_holds_its_key_and_a_start_returns_it():
    paused = pause_workflow(start_workflow("echo", {"n": 1}, idempotency_key="report-7", unique_while_active=True))
    again = start_workflow("echo", {"n": 2}, idempotency_key="report-7", unique_while_active=True)
    assert (again.pk, again.status, again.input_data) == (paused.pk, "paused", {"n": 1})
    assert Workflow.objects.count() == 1
    assert resume_workflow(paused).status == "pending"  # nothing of its key stands in its way


def test_idempotency_key__a_paused_run_holds_its_key_for_ever_as_any_run_does():
    paused = pause_workflow(start_workflow("echo", {"n": 1}, idempotency_key="order-7"))
    assert start_workflow("echo", {"n": 2}, idempotency_key="order-7").pk == paused.pk
    assert Workflow.objects.count() == 1


def test_debounce__a_paused_run_not_yet_claimed_holds_its_key_and_takes_the_latest_input():
    paused = pause_workflow(start_workflow("echo", {"n": 1}, idempotency_key="reindex", debounce=30))
    again = start_workflow("echo", {"n": 2}, idempotency_key="reindex", debounce=30)
    assert again.pk == paused.pk
    row = Workflow.objects.get()
    assert (row.status, row.input_data) == ("paused", {"n": 2})
    assert resume_workflow(paused).status == "pending"


def test_decorated_workflow__start_takes_the_same_options():
    first = echo.start({"n": 1}, idempotency_key="report-7", unique_while_active=True)
    assert echo.start({"n": 2}, idempotency_key="report-7", unique_while_active=True).pk == first.pk
    assert echo.start({"n": 3}, idempotency_key="burst", debounce=5).key_scope == "debounce"


def test_debounce__starts_within_the_window_become_one_run_with_the_latest_input_due_at_its_end():
    before = clock.database_now()  # a window's end is of the database's clock
    first = start_workflow("echo", {"n": 1}, idempotency_key="reindex", debounce=30)
    second = start_workflow("echo", {"n": 2}, idempotency_key="reindex", debounce=30)
    third = start_workflow("echo", {"n": 3}, idempotency_key="reindex", debounce=datetime.timedelta(seconds=30))
    assert first.pk == second.pk == third.pk and third.input_data == {"n": 3}
    row = Workflow.objects.get()
    assert row.input_data == {"n": 3}
    assert before + datetime.timedelta(seconds=30) <= row.run_after <= clock.now() + datetime.timedelta(seconds=30)
    assert row.run_after == first.run_after  # the window is the first start's


def test_debounce__the_run_counts_under_the_concurrency_key_of_the_latest_starts_input():
    start_workflow("flow_hold", {"key": "tenant-a"}, idempotency_key="sync", debounce=30)
    latest = start_workflow("flow_hold", {"key": "tenant-b"}, idempotency_key="sync", debounce=30)
    row = Workflow.objects.get()
    assert (row.input_data, row.concurrency_key) == ({"key": "tenant-b"}, "tenant-b")
    assert latest.concurrency_key == "tenant-b"


def test_debounce__a_runs_time_limit_counts_from_the_end_of_its_window_when_it_starts():
    start_workflow("echo", {"n": 1}, idempotency_key="reindex", debounce=60, timeout=10)
    row = Workflow.objects.get()
    assert row.deadline == row.run_after + datetime.timedelta(seconds=10)  # not cancelled before it starts


def test_debounce__a_start_after_the_run_was_claimed_makes_a_new_run():
    first = start_workflow("echo", {"n": 1}, idempotency_key="reindex", debounce=0.001)
    Workflow.objects.filter(pk=first.pk).update(run_after=None)
    drain()
    second = start_workflow("echo", {"n": 2}, idempotency_key="reindex", debounce=30)
    assert second.pk != first.pk
    assert Workflow.objects.get(pk=first.pk).output_data == {"n": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(unique_while_active=True), "unique_while_active needs an idempotency_key"),
        (dict(debounce=5), "debounce needs an idempotency_key"),
        (dict(idempotency_key="k", unique_while_active="yes"), "unique_while_active must be True or False"),
        (dict(idempotency_key="k", debounce=0), "debounce must be a positive number"),
        (dict(idempotency_key="k", debounce=-1), "debounce must be a positive number"),
        (dict(idempotency_key="k", debounce=True), "debounce must be a positive number"),
        (dict(idempotency_key="k", debounce="5"), "debounce must be a positive number"),
        (dict(idempotency_key="k", debounce=float("nan")), "debounce must be a positive number"),
        (dict(idempotency_key="k", debounce=5, unique_while_active=True), "not both"),
        (dict(idempotency_key="k", debounce=5, run_after=timezone.now()), "run_after or debounce"),
    ],
)
def test_unique_and_debounced_starts__bad_options_raise_and_write_nothing(options, message):
    with pytest.raises(InvalidWorkflowInput, match=message):
        start_workflow("echo", {}, **options)
    assert not Workflow.objects.exists()


def test_search_by_key__finds_runs_of_every_scope_through_the_key_indexes():
    kept = start_workflow("echo", {}, idempotency_key="order-7")
    unique = start_workflow("echo", {}, idempotency_key="order-7", unique_while_active=True)
    found = Workflow.objects.filter(search_q("order-7")).order_by()
    assert set(found.values_list("pk", flat=True)) == {kept.pk, unique.pk}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a plan with no index left would still scan
    plan = found.explain()
    assert "Seq Scan" not in plan and "uniq_workflows_idempotency_key" in plan and "idx_workflows_scoped_key" in plan

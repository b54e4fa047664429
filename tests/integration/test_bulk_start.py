"""``start_workflows``: many runs in one statement, with the guarantees of ``start_workflow``."""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestration import InvalidWorkflowInput, UnknownWorkflowType, start_workflow, start_workflows
from orchestration.models import Workflow, WorkflowStatus
from tests.support import drain, new_work_listener


@pytest.mark.django_db
def test_start_workflows__inserts_every_run_in_one_statement_and_returns_them_in_order():
    with CaptureQueriesContext(connection) as queries:
        started = start_workflows("echo", [{"n": n} for n in range(200)])
    assert len(queries) == 1
    assert [workflow.input_data for workflow in started] == [{"n": n} for n in range(200)]
    first = started[0]
    assert isinstance(first.pk, uuid.UUID) and first.created_at is not None
    assert (first.status, first.attempts, first.current_step, first.queue) == (WorkflowStatus.PENDING, 0, 0, "default")
    assert Workflow.objects.count() == 200
    assert drain(max_runs=300) == ["completed"] * 200


@pytest.mark.django_db
def test_start_workflows__applies_the_options_and_the_decorators_defaults_to_every_run():
    later = timezone.now() + datetime.timedelta(hours=1)
    started = start_workflows("on_other_queue", [1, 2], run_after=later, max_retries=7)
    rows = Workflow.objects.filter(pk__in=[w.pk for w in started])
    assert {(w.queue, w.priority, w.max_retries, w.run_after) for w in rows} == {("other", 5, 7, later)}


@pytest.mark.django_db
def test_start_workflows__with_idempotency_keys__returns_the_first_run_of_each_key():
    earlier = start_workflow("echo", "before", idempotency_key="k1")
    started = start_workflows("echo", ["a", "b", "c", "d"], idempotency_keys=["k1", "k2", None, "k2"])
    assert started[0].pk == earlier.pk and started[0].input_data == "before"
    assert started[1].pk == started[3].pk and started[3].input_data == "b"
    assert started[2].idempotency_key is None
    assert Workflow.objects.count() == 3


@pytest.mark.django_db
def test_start_workflows__checks_everything_before_writing_anything():
    with pytest.raises(UnknownWorkflowType):
        start_workflows("nobody_registers_this", [1])
    with pytest.raises(InvalidWorkflowInput, match="Input 1 of workflow 'echo'"):
        start_workflows("echo", [1, {1, 2}])
    with pytest.raises(InvalidWorkflowInput, match="2 inputs but 1 idempotency keys"):
        start_workflows("echo", [1, 2], idempotency_keys=["k"])
    with pytest.raises(InvalidWorkflowInput, match="idempotency_key"):
        start_workflows("echo", [1], idempotency_keys=[""])
    assert not Workflow.objects.exists()
    assert start_workflows("echo", []) == []


@pytest.mark.django_db
def test_start_workflows__inside_a_transaction_that_rolls_back__never_existed():
    with pytest.raises(RuntimeError), transaction.atomic():
        start_workflows("echo", [1, 2, 3])
        raise RuntimeError("roll back")
    assert not Workflow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_start_workflows__wakes_idle_workers_once_and_only_at_commit():
    with new_work_listener() as listener:
        with transaction.atomic():
            start_workflows("echo", range(50))
            start_workflows("on_other_queue", range(50))
            assert list(listener.notifies(timeout=0.3)) == []
        payloads = sorted(notice.payload for notice in listener.notifies(timeout=1.0, stop_after=3))
    assert payloads == ["default", "other"]


@pytest.mark.django_db
def test_start_workflows__names_the_input_over_the_size_limit_or_holding_a_nul(settings):
    settings.ORCHESTRATION = {"MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(InvalidWorkflowInput, match="Input 2 of workflow 'echo' is 202 bytes"):
        start_workflows("echo", [1, 2, "x" * 200])
    with pytest.raises(InvalidWorkflowInput, match="Input 1 of workflow 'echo' contains a NUL"):
        start_workflows("echo", [1, "a\x00b"])
    assert not Workflow.objects.exists()


@pytest.mark.django_db
def test_start_workflows__names_the_input_holding_a_lone_surrogate():
    with pytest.raises(InvalidWorkflowInput, match="Input 1 of workflow 'echo' contains a lone surrogate"):
        start_workflows("echo", ["ok", {"name": "half \ud800 of a pair"}])
    assert not Workflow.objects.exists()


@pytest.mark.django_db
def test_start_workflows__names_the_input_nested_too_deeply():
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(InvalidWorkflowInput, match="Input 0 of workflow 'echo' nests arrays and objects"):
        start_workflows("echo", [deep, 1])
    assert not Workflow.objects.exists()


@pytest.mark.django_db
def test_start_workflows__returns_rows_equal_to_the_stored_ones_in_every_field():
    started = start_workflows("echo", [{"n": 1}, [1, 2]], idempotency_keys=["key-1", None])
    for workflow in started:
        stored = Workflow.objects.get(pk=workflow.pk)
        for field in Workflow._meta.concrete_fields:
            assert getattr(workflow, field.attname) == getattr(stored, field.attname), field.name
        assert (workflow._state.adding, workflow._state.db) == (False, "default")
    started[0].priority = 9
    started[0].save(update_fields=["priority"])  # an update of the stored row, not an insert
    assert Workflow.objects.get(pk=started[0].pk).priority == 9 and Workflow.objects.count() == 2


@pytest.mark.django_db
def test_start_workflows__with_a_post_init_receiver__builds_its_rows_through_the_model():
    seen: list[Workflow] = []

    def receiver(sender: type, instance: Workflow, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Workflow)
    try:
        started = start_workflows("echo", [1, 2])
    finally:
        post_init.disconnect(receiver, sender=Workflow)
    assert seen == started and [workflow.input_data for workflow in started] == [1, 2]

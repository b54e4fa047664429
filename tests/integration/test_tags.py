"""Tags: given at every start, stored in ``workflows.tags``, found by
``tags__contains`` through their index, inherited by a child when asked, and
refused, with nothing stored, when they are not a list of strings."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from orchestration import InvalidWorkflowInput, astart_workflow, start_workflow, start_workflows
from orchestration.models import Workflow
from tests.support import drain, run_async
from tests.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db


def test_start_workflow__stores_its_tags_in_order_each_once():
    run = start_workflow("echo", 1, tags=["customer-42", "import", "customer-42"])
    assert run.tags == ["customer-42", "import"]
    assert Workflow.objects.get(pk=run.pk).tags == ["customer-42", "import"]


def test_start_workflow__without_tags__stores_none():
    assert Workflow.objects.get(pk=start_workflow("echo", 1).pk).tags is None
    assert Workflow.objects.get(pk=start_workflow("echo", 1, tags=[]).pk).tags is None


def test_tags_contains__finds_the_runs_of_a_tag():
    mine = start_workflow("echo", 1, tags=["customer-42", "import"])
    start_workflow("echo", 2, tags=["customer-7"])
    start_workflow("echo", 3)
    assert list(Workflow.objects.filter(tags__contains=["customer-42"]).values_list("pk", flat=True)) == [mine.pk]
    assert Workflow.objects.filter(tags__contains=["customer-42", "import"]).get().pk == mine.pk
    assert not Workflow.objects.filter(tags__contains=["customer-42", "export"]).exists()


def test_start_workflows__tags_every_run_of_the_batch():
    runs = start_workflows("echo", [1, 2, 3], tags=["nightly"])
    assert Workflow.objects.filter(tags__contains=["nightly"]).count() == 3
    assert all(run.tags == ["nightly"] for run in runs)


def test_decorated_workflow__start_takes_tags():
    assert Workflow.objects.get(pk=three_steps.start({}, tags=["t"]).pk).tags == ["t"]


@pytest.mark.django_db(transaction=True)  # it writes from Django's thread for sync work
def test_astart_workflow__takes_tags():
    run = run_async(astart_workflow("echo", 1, tags=["async"]))
    assert Workflow.objects.get(pk=run.pk).tags == ["async"]


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ("customer-42", "tags must be a list of strings, not str"),
        ([42], "tags must be a list of non-empty strings; 42 is not one"),
        (["ok", ""], "'' is not one"),
        (["a\nb"], "contains a control character"),
        (["x" * 101], "is 101 characters; the limit is 100"),
        ([f"t{n}" for n in range(21)], "at most 20 tags, not 21"),
        ({"customer": 42}, "not dict"),
    ],
)
def test_start_workflow__tags_that_are_not_a_short_list_of_strings__are_a_clear_error_and_store_nothing(tags, message):
    with pytest.raises(InvalidWorkflowInput, match=message):
        start_workflow("echo", 1, tags=tags)
    with pytest.raises(InvalidWorkflowInput, match=message):
        start_workflows("echo", [1, 2], tags=tags)
    assert list(Workflow.objects.values_list("workflow_type", "tags")) == []


@pytest.mark.django_db(transaction=True)
def test_start_child__inherits_its_parents_tags_only_when_asked():
    parent = start_workflow("tags_its_children", {}, tags=["customer-42"])
    drain()
    inherited, own, batched = (uuid.UUID(pk) for pk in Workflow.objects.get(pk=parent.pk).output_data)
    assert Workflow.objects.get(pk=inherited).tags == ["customer-42", "child"]
    assert Workflow.objects.get(pk=own).tags == ["child"]
    assert Workflow.objects.get(pk=batched).tags == ["customer-42"]  # ctx.start_children takes it too


def test_tags_contains__reads_the_tags_index():
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        compiled, params = Workflow.objects.filter(tags__contains=["customer-42"]).order_by().query.sql_with_params()
        cursor.execute(f"EXPLAIN {compiled}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "idx_workflows_tags" in plan

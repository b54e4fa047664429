"""Tags: given at every start, stored in ``workflows.tags``, found by
``tags__contains`` through their index, inherited by a child when asked, and
refused, with nothing stored, when they are not a list of strings."""

from __future__ import annotations

import datetime
import importlib
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from orchestration import InvalidWorkflowInput, astart_workflow, start_workflow, start_workflows
from orchestration.models import TAGGED_NEWEST_FIRST, Workflow, WorkflowTag, tagged_q
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


def test_decorated_workflow__start_with_tags_that_are_not_a_list_of_strings__is_a_clear_error_and_stores_nothing():
    with pytest.raises(InvalidWorkflowInput, match="tags must be a list of strings, not str"):
        three_steps.start({}, tags="nightly")
    assert not Workflow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_astart_workflow__tags_that_are_not_a_list_of_strings__are_a_clear_error_and_store_nothing():
    with pytest.raises(InvalidWorkflowInput, match="42 is not one"):
        run_async(astart_workflow("echo", 1, tags=[42]))
    assert not Workflow.objects.exists()


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


def tag_rows(tag: str) -> set[uuid.UUID]:
    return set(WorkflowTag.objects.filter(tag=tag).values_list("workflow_id", flat=True))


def test_workflow_tags__holds_a_row_per_tag_of_every_tagged_start_and_none_for_an_untagged_one():
    one = start_workflow("echo", 1, tags=["customer-42", "import"])
    batch = start_workflows("echo", [2, 3], tags=["customer-42"])
    start_workflow("echo", 4)
    assert tag_rows("customer-42") == {one.pk, *(run.pk for run in batch)}
    assert tag_rows("import") == {one.pk}
    assert WorkflowTag.objects.count() == 4


def test_workflow_tags__follows_a_run_written_by_sql_its_tags_changed_and_its_delete():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, input_data, tags) "
            """VALUES ('echo', '1', '["by-sql", 7, "by-sql"]'), ('echo', '2', '"not a list"') RETURNING id"""
        )
        by_sql = cursor.fetchone()[0]
    assert tag_rows("by-sql") == {by_sql} and WorkflowTag.objects.count() == 1  # strings of an array only, once
    Workflow.objects.filter(pk=by_sql).update(tags=["renamed"])
    assert (tag_rows("by-sql"), tag_rows("renamed")) == (set(), {by_sql})
    Workflow.objects.filter(pk=by_sql).update(created_at=timezone.now() - datetime.timedelta(days=1))
    assert WorkflowTag.objects.get().created_at == Workflow.objects.get(pk=by_sql).created_at
    Workflow.objects.filter(pk=by_sql).delete()
    assert not WorkflowTag.objects.exists()


def test_tagged_q__lists_a_tags_runs_newest_first_as_tags_contains_finds_them():
    runs = [start_workflow("echo", n, tags=["customer-42"] if n % 2 else ["customer-7"]) for n in range(6)]
    newest_first = Workflow.objects.filter(tagged_q("customer-42")).order_by(*TAGGED_NEWEST_FIRST)
    expected = Workflow.objects.filter(tags__contains=["customer-42"]).order_by("-created_at", "-pk")
    assert list(newest_first) == list(expected) == [runs[5], runs[3], runs[1]]
    assert Workflow.objects.filter(tagged_q("customer-42"), tagged_q("customer-7")).count() == 0


def test_tagged_q__reads_a_page_of_a_tags_newest_runs_in_order_from_workflow_tags_without_a_sort():
    with connection.cursor() as cursor:  # 20,000 runs a second apart, a customer's of 100 on each
        cursor.execute(
            "INSERT INTO workflows (workflow_type, input_data, created_at, tags) "
            "SELECT 'echo', '1', now() - g * interval '1 s', jsonb_build_array('customer-' || g % 100) "
            "FROM generate_series(1, 20000) g"
        )
        cursor.execute("ANALYZE workflows, workflow_tags")
        listed = Workflow.objects.filter(tagged_q("customer-42")).order_by(*TAGGED_NEWEST_FIRST)[:50]
        compiled, params = listed.query.sql_with_params()
        cursor.execute(f"EXPLAIN {compiled}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Scan Backward using workflow_tags_pkey" in plan and "Sort" not in plan, plan


def test_migration_0034_backfill__copies_the_tags_of_runs_written_before_its_triggers():
    tagged = [start_workflow("echo", n, tags=["customer-42", f"n-{n}"]) for n in range(3)]
    start_workflow("echo", 9)
    WorkflowTag.objects.all().delete()  # as before the triggers
    migration = importlib.import_module("orchestration.migrations.0034_workflow_tags")
    with connection.schema_editor(atomic=False) as schema_editor:
        migration.backfill(None, schema_editor)
    assert tag_rows("customer-42") == {run.pk for run in tagged}
    assert WorkflowTag.objects.count() == 6

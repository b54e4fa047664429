"""``manage.py workflows``: each verb on real rows, in text and JSON, and a bad
id or filter answered with a clear message and its exit status."""

from __future__ import annotations

import datetime
import io
import json
import shlex
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowEvent, WorkflowWorker
from tests.admin_support import failed_three_steps, record_children, record_steps
from tests.factories import WorkflowFactory, WorkflowStepFactory
from tests.support import drain, run_manage

pytestmark = [pytest.mark.django_db, pytest.mark.moments]

#: Queries ``workflows show`` may make, whatever the number of a run's steps and children.
SHOW_QUERIES = 7


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_json(*args: str):
    return json.loads(run(*args, "--json"))


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as raised:
        call_command("workflows", *args, stdout=io.StringIO(), stderr=io.StringIO())
    return raised.value


# -- list ---------------------------------------------------------------------------


def test_list__newest_first_with_the_admins_filters():
    old = WorkflowFactory(workflow_type="echo", status="failed", queue="other")
    Workflow.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=3))
    failed = WorkflowFactory(workflow_type="echo", status="failed")
    pending = WorkflowFactory(workflow_type="echo", status="pending")
    waiting = WorkflowFactory(
        status="pending", waiting_for="event:approval", run_after=timezone.now() + datetime.timedelta(hours=1)
    )
    child = WorkflowFactory(parent=failed)
    held = WorkflowFactory(status="running", worker_id="host:1:ab")
    for age, workflow in enumerate((held, child, waiting, pending, failed)):  # one transaction: one now()
        Workflow.objects.filter(pk=workflow.pk).update(created_at=timezone.now() - datetime.timedelta(seconds=age))

    def ids(*args: str) -> list[str]:
        return [row["id"] for row in run_json("list", *args)]

    assert ids() == [str(w.pk) for w in (held, child, waiting, pending, failed, old)]
    assert ids("--status", "failed") == [str(failed.pk), str(old.pk)]
    assert ids("--status", "failed", "--since", "1d") == [str(failed.pk)]
    assert ids("--type", "echo", "--status", "pending") == [str(pending.pk)]
    assert ids("--queue", "other") == [str(old.pk)]
    assert ids("--pending", "waiting") == ids("--pending", "event") == [str(waiting.pk)]
    assert ids("--parent", str(failed.pk)) == [str(child.pk)]
    assert ids("--worker", "host:1:ab") == [str(held.pk)]
    assert ids("--search", str(old.pk)[:13]) == [str(old.pk)]
    assert ids("--limit", "2") == [str(held.pk), str(child.pk)]
    assert run_json("list", "--pending", "waiting")[0]["pending_reason"] == "waiting"


def test_list__as_a_table():
    failed = failed_three_steps()
    text = run("list")
    header, row = text.splitlines()[:2]
    assert header.split() == ["id", "type", "status", "queue", "step", "attempts", "created", "error"]
    assert row.split()[:6] == [str(failed.pk), "three_steps", "failed", "default", "2", "4/4"]  # failed at step 2
    assert row.endswith("ConnectionError: bank API unreachable")
    assert run("list", "--status", "running").splitlines()[-1] == "(no workflow matches)"


def test_list__shows_the_step_a_run_failed_at_and_a_completed_runs_steps_done():
    WorkflowFactory(status="failed", current_step=0, error_message="boom\n" + "x" * 200)
    row = run("list").splitlines()[1]
    assert row.split()[4] == "1" and row.endswith("…") and "boom x" in row
    WorkflowFactory(status="completed", current_step=4)
    assert "4 done" in run("list", "--status", "completed").splitlines()[1]


def test_list__a_run_no_worker_here_registers_is_shown_waiting_for_a_worker():
    unknown = WorkflowFactory(workflow_type="nobody_registers_this")
    WorkflowFactory(workflow_type="echo")
    drain()
    row = run("list", "--pending", "worker").splitlines()[1]
    assert row.startswith(f"{unknown.pk}  nobody_registers_this  pending (waiting for a worker)")
    shown = run("show", str(unknown.pk))
    assert "waiting for:worker: one that registers workflow type 'nobody_registers_this'" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--status", "done"), "Unknown status 'done': one of pending, running, completed, failed, cancelled, paused."),
        (("--pending", "bored"), "Unknown pending reason 'bored': one of due, waiting, retrying"),
        (("--parent", "12"), "Parent '12' is not a workflow id (a UUID)."),
    ],
)
def test_list__a_bad_filter_is_refused_with_exit_status_2(args, message):
    error = refused("list", *args)
    assert message in str(error) and error.returncode == 2


# -- show ---------------------------------------------------------------------------


def test_show__one_workflow_its_steps_children_and_events():
    failed = failed_three_steps()
    WorkflowFactory(parent=failed, status="completed")
    shown = run_json("show", str(failed.pk))
    assert (shown["id"], shown["status"], shown["attempts"]) == (str(failed.pk), "failed", 4)
    assert [(s["step_number"], s["status"]) for s in shown["steps"]] == [(1, "completed"), (2, "failed")]
    assert shown["children"] == {"completed": 1}
    assert shown["error_traceback"].startswith("Traceback")
    assert shown["input_data"] == {"order": 7, "items": ["a", "b"]}
    text = run("show", str(failed.pk))
    assert "status:     failed" in text and "attempts:   4 of 4" in text
    assert "ConnectionError: bank API unreachable" in text and "children:   1 in all: 1 completed" in text


def test_show__counts_a_parents_children_by_status_and_names_the_commands_that_list_them():
    parent = WorkflowFactory(status="pending", waiting_for="children")
    kids = [WorkflowFactory(parent=parent, status=status) for status in ("failed", "completed", "pending", "completed")]
    WorkflowFactory(status="failed")  # another family
    assert run_json("show", str(parent.pk))["children"] == {"pending": 1, "completed": 2, "failed": 1}
    text = run("show", str(parent.pk))
    assert "children:   4 in all: 1 pending, 2 completed, 1 failed\n" in text
    # One command a status, each one a shell takes as it is (no "|" in it): pasted, it lists that status's children.
    commands = [shlex.split(line) for line in text.splitlines() if "workflows list --parent" in line]
    assert [" ".join(words) for words in commands] == [
        f"manage.py workflows list --parent {parent.pk} --status {status}"
        for status in ("pending", "completed", "failed")
    ]
    for words in commands:
        status = words[-1]
        listed = {row["id"] for row in run_json(*words[2:])}
        assert listed == {str(kid.pk) for kid in kids if kid.status == status}, status


@pytest.mark.parametrize("children", [3, 10_000])
def test_show__of_a_parent_costs_the_same_queries_whatever_its_children(django_assert_max_num_queries, children):
    parent = WorkflowFactory(status="pending", waiting_for="children")
    record_children(parent, children)
    with django_assert_max_num_queries(SHOW_QUERIES):
        text = run("show", str(parent.pk))
    assert f"children:   {children} in all: {children - children // 3} completed, {children // 3} failed" in text


def test_show__a_forks_origin_patches_and_error_history():
    original = WorkflowFactory(status="failed", patches={"charge-v2": 1})
    fork = WorkflowFactory(
        forked_from=original,
        patches={"charge-v2": 1},
        error_history=[{"at": "2026-01-01T00:00:00Z", "attempt": 1, "step": 2, "status": "pending", "message": "boom"}],
    )
    shown = run_json("show", str(fork.pk))
    assert (shown["forked_from_id"], shown["patches"]) == (str(original.pk), {"charge-v2": 1})
    assert [entry["message"] for entry in shown["error_history"]] == ["boom"]
    text = run("show", str(fork.pk))
    assert f"forked from:{original.pk}" in text and 'patches:    {"charge-v2": 1}' in text
    assert "errors:     2026-01-01T00:00:00Z attempt 1 step 2 (pending): boom" in text


def test_list__tag_lists_the_runs_started_with_it():
    tagged = start_workflow("echo", 1, tags=["customer-42", "import"])
    start_workflow("echo", 2, tags=["customer-7"])
    start_workflow("echo", 3)
    assert [row["id"] for row in run_json("list", "--tag", "customer-42")] == [str(tagged.pk)]
    assert run_json("list", "--tag", "customer-42")[0]["tags"] == ["customer-42", "import"]
    assert [row["id"] for row in run_json("list", "--search", "customer-42")] == [str(tagged.pk)]
    assert run("list", "--tag", "nobody").splitlines()[-1] == "(no workflow matches)"


def test_show__a_runs_tags_and_progress():
    run_row = WorkflowFactory(
        status="running", tags=["customer-42"], progress={"done": 40, "total": 100, "message": "resizing"}
    )
    assert run_json("show", str(run_row.pk))["progress"] == {"done": 40, "total": 100, "message": "resizing"}
    text = run("show", str(run_row.pk))
    assert "progress:   40 of 100 (40%): resizing" in text and "tags:       customer-42" in text


def test_show__progress_without_numbers_shows_its_message_or_its_json():
    said = WorkflowFactory(status="running", progress={"message": "warming up"})
    raw = WorkflowFactory(status="running", progress={"phase": 2})
    assert "progress:   warming up" in run("show", str(said.pk))
    assert 'progress:   {"phase": 2}' in run("show", str(raw.pk))


def test_show__a_key_with_its_scope():
    started = start_workflow("echo", {}, idempotency_key="report-7", unique_while_active=True)
    shown = run_json("show", str(started.pk))
    assert (shown["idempotency_key"], shown["scoped_key"], shown["key_scope"]) == (None, "report-7", "active")
    assert "key:        report-7 (active)" in run("show", str(started.pk))


def test_show__finds_a_run_by_the_end_of_its_id_the_admin_shows_or_by_its_start():
    workflow = WorkflowFactory(workflow_type="echo")
    for part in (str(workflow.pk)[-8:], str(workflow.pk)[:13], str(workflow.pk)[-8:].upper()):
        assert run_json("show", part)["id"] == str(workflow.pk), part
    run_json("cancel", str(workflow.pk)[-8:])
    assert Workflow.objects.get(pk=workflow.pk).status == "cancelled"


def test_show__an_id_part_that_names_several_runs_lists_them_and_exits_2():
    first = WorkflowFactory(id=uuid.UUID("01a00000-0000-7000-8000-0000000000aa"))
    second = WorkflowFactory(id=uuid.UUID("01a00000-0000-7000-8000-0000000001aa"))
    error, out = refused_by("workflows", "show", "aa", "--json")
    assert error.returncode == 2 and f"{first.pk}, {second.pk}" in str(error) and "Give more of the id" in str(error)
    assert json.loads(out)["exit_status"] == 2
    missing = refused("show", "abcdef12")
    assert (str(missing), missing.returncode) == ("No workflow abcdef12: no id is, starts or ends with it.", 3)


def test_show__a_bad_or_unknown_id_says_so_with_its_exit_status():
    assert (str(refused("show", "not-an-id")), refused("show", "not-an-id").returncode) == (
        "'not-an-id' is not a workflow id, nor the first or last characters of one.",
        2,
    )
    missing = uuid.uuid4()
    error = refused("show", str(missing))
    assert (str(error), error.returncode) == (f"No workflow {missing}.", 3)


# -- workers ------------------------------------------------------------------------


def test_workers__the_live_processes_and_what_each_holds():
    WorkflowWorker.objects.create(id="a:1:x", host="a", pid=1, queues=["other"], concurrency=2, version="1")
    WorkflowWorker.objects.create(id="b:2:y", host="b", pid=2, concurrency=4, version="1", gone_at=timezone.now())
    running = WorkflowFactory(status="running", worker_id="a:1:x")
    listed = run_json("workers")
    assert [(w["id"], w["state"], w["holds"]) for w in listed] == [("a:1:x", "live", [str(running.pk)])]
    assert {w["id"]: w["state"] for w in run_json("workers", "--all")} == {"a:1:x": "live", "b:2:y": "gone"}
    text = run("workers")
    assert text.splitlines()[0].split()[:4] == ["worker", "state", "queues", "threads"]
    assert "a:1:x" in text and str(running.pk) in text


def test_workers__each_with_its_hung_step_bodies_and_restarts():
    WorkflowWorker.objects.create(id="a:1:x", host="a", pid=1, concurrency=2, version="1", abandoned_bodies=2)
    WorkflowWorker.objects.create(id="b:2:y", host="b", pid=2, concurrency=2, version="1", restarts=3)
    listed = {w["id"]: (w["abandoned_bodies"], w["restarts"]) for w in run_json("workers")}
    assert listed == {"a:1:x": (2, 0), "b:2:y": (0, 3)}
    heading, *lines = run("workers").splitlines()
    column = heading.split().index("hung/restarts")
    assert {line.split()[0]: line.split()[column] for line in lines} == {"a:1:x": "2/0", "b:2:y": "0/3"}


# -- repairs ------------------------------------------------------------------------


def test_retry_restart_and_cancel__through_the_api_each_reporting_its_new_status():
    failed, cancelled = failed_three_steps(), WorkflowFactory(status="cancelled")
    assert [(r["id"], r["status"]) for r in run_json("retry", str(failed.pk), str(cancelled.pk))] == [
        (str(failed.pk), "pending"),
        (str(cancelled.pk), "pending"),
    ]
    assert f"{failed.pk}: cancelled\n" in run("cancel", str(failed.pk), "--reason", "not needed")
    assert Workflow.objects.get(pk=failed.pk).error_message == "not needed"
    done = WorkflowFactory(status="completed")
    WorkflowStepFactory(workflow=done, step_number=1)
    assert run_json("restart", str(done.pk))[0]["status"] == "pending"
    assert not done.steps.exists()


def test_retry__from_a_step():
    failed = failed_three_steps()
    assert run_json("retry", str(failed.pk), "--from-step", "1")[0]["status"] == "pending"
    assert not failed.steps.exists()


def test_retry__from_a_step_past_the_runs_steps_is_refused_and_runs_nothing():
    run_ = start_workflow("always_fails", max_retries=0)  # one step, which failed
    assert drain() == ["failed"]
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("workflows", "retry", str(run_.pk), "--from-step", "99", stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 4
    assert f"Cannot retry workflow {run_.pk} from step 99: the steps before it must be completed" in err.getvalue()
    assert Workflow.objects.get(pk=run_.pk).status == "failed"
    assert drain() == []


def test_repairs__a_refused_unknown_or_bad_id_is_reported_and_sets_the_exit_status():
    pending, failed = WorkflowFactory(status="pending"), failed_three_steps()
    missing = uuid.uuid4()
    error = refused("retry", str(failed.pk), str(pending.pk))
    assert error.returncode == 4 and "1 of 2 workflow(s) not retried" in str(error)
    assert Workflow.objects.get(pk=failed.pk).status == "pending"  # the others are still repaired
    assert refused("cancel", str(missing)).returncode == 3
    assert refused("restart", "nope", str(missing)).returncode == 3  # the worst of a bad id (2) and a missing one
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("workflows", "retry", str(pending.pk), "--json", stdout=out, stderr=io.StringIO())
    [result] = json.loads(out.getvalue())
    assert not result["ok"] and "Cannot retry" in result["error"]


# -- events and queues --------------------------------------------------------------


def test_send_event__wakes_the_waiting_workflow():
    workflow = start_workflow("awaits_approval", {})
    drain()
    sent = run_json("send-event", str(workflow.pk), "approval", "--payload", '{"by": "ops"}')
    assert sent["event"] == "approval"
    assert WorkflowEvent.objects.get(pk=sent["event_id"]).payload == {"by": "ops"}
    drain()
    assert Workflow.objects.get(pk=workflow.pk).status == "completed"


def test_send_event__bad_payload_finished_workflow_or_unknown_id():
    done = WorkflowFactory(status="completed")
    assert refused("send-event", str(done.pk), "x", "--payload", "{oops").returncode == 2
    assert refused("send-event", str(done.pk), "x").returncode == 4
    assert refused("send-event", str(uuid.uuid4()), "x").returncode == 3


def test_pause_and_resume__of_run_ids_pause_and_resume_those_runs():
    first, second = start_workflow("three_steps"), start_workflow("three_steps")
    assert run("pause", str(first.pk), str(second.pk)) == f"{first.pk}: paused\n{second.pk}: paused\n"
    assert set(Workflow.objects.values_list("status", flat=True)) == {"paused"}
    assert run_json("resume", str(first.pk)) == [{"id": str(first.pk), "ok": True, "status": "pending"}]
    assert run("resume", str(second.pk)) == f"{second.pk}: resumed, now pending\n"


def test_pause__of_a_finished_run_is_refused_naming_its_status():
    done = WorkflowFactory(status="completed")
    error = refused("pause", str(done.pk))
    assert error.returncode == 4
    assert Workflow.objects.get(pk=done.pk).status == "completed"
    assert refused("pause", str(uuid.uuid4())).returncode == 3


def test_pause__of_several_names_that_are_not_all_ids_is_a_bad_argument():
    error = refused("pause", str(uuid.uuid4()), "default")
    assert error.returncode == 2 and "whole workflow ids or one queue's name" in str(error)


def test_pause_and_resume__are_aliases_of_workflow_queues_and_print_the_same():
    paused = run_json("pause", "default")
    assert (paused["queue"], paused["paused"]) == ("default", True)
    same = io.StringIO()
    call_command("workflow_queues", "resume", "default", "--json", stdout=same)
    assert json.loads(same.getvalue())["paused"] is False
    assert run("pause", "default").startswith("queue default: paused; concurrency none")


# -- exit statuses and errors under --json (docs/reference/commands.md's table) -------------


def refused_by(command: str, *args: str) -> tuple[CommandError, str]:
    """The error of ``command`` and what it wrote to stdout."""
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(command, *args, stdout=out, stderr=io.StringIO())
    return raised.value, out.getvalue()


@pytest.mark.parametrize(
    "args, message",
    [
        (("runworkers", "--queues", "nosuch"), "No queue 'nosuch'"),
        (("workflow_queues", "limits", "default", "--rate-limit", "10/fortnight"), "--rate-limit must be a rate"),
        (("workflow_queues", "limits", "default", "--concurrency", "-1"), "--concurrency must be a whole number"),
        (("workflow_queues", "pause", "nosuch"), "No queue 'nosuch'"),
        (("workflows", "resume", "nosuch"), "No queue 'nosuch'"),
        (("purge_workflows", "--older-than", "30", "--status", "running"), "Only finished workflows can be purged"),
    ],
)
def test_exit_status__a_refused_option_or_argument_exits_2(args, message):
    error, _ = refused_by(*args)
    assert error.returncode == 2 and message in str(error)


def test_json__an_error_is_a_json_object_on_stdout_with_its_exit_status():
    missing = uuid.uuid4()
    error, out = refused_by("workflows", "send-event", "--json", str(missing), "approval")
    assert json.loads(out) == {"error": f"No workflow {missing}.", "exit_status": 3} and error.returncode == 3
    error, out = refused_by("workflows", "resume", "--json", "nosuch")
    assert json.loads(out)["exit_status"] == 2 and "No queue 'nosuch'" in json.loads(out)["error"]
    error, out = refused_by("workflow_queues", "limits", "default", "--concurrency", "0", "--json")
    assert json.loads(out)["exit_status"] == 2


def test_json__repairs_of_several_ids_print_one_document_their_results():
    done = WorkflowFactory(status="completed")
    error, out = refused_by("workflows", "cancel", "--json", str(done.pk))
    (result,) = json.loads(out)
    assert result["ok"] is False and error.returncode == 4


def test_exit_status__a_refused_option_reaches_the_shell_as_2():
    result = run_manage("workflow_queues", "limits", "default", "--rate-limit", "10/fortnight", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--rate-limit must be a rate" in result.stderr


def test_exit_status__reaches_the_shell():
    missing = uuid.uuid4()
    result = run_manage("workflows", "show", str(missing), timeout=60)
    assert result.returncode == 3
    assert f"No workflow {missing}." in result.stderr


def test_list__a_read_past_its_timeout_is_cancelled_and_says_how_to_narrow_it(monkeypatch):
    from django.db import connection

    from orchestration.reports import listing

    def slow_rows(filters, limit):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")

    monkeypatch.setattr(listing, "rows", slow_rows)
    error = refused("list", "--timeout", "0.05")
    assert error.returncode == 1
    assert "took longer than 0.05 s and was cancelled: narrow the filters, or raise --timeout" in str(error)


def long_failed_run(steps: int, failed_at: int) -> Workflow:
    workflow = WorkflowFactory(status="failed", current_step=failed_at - 1)
    record_steps(workflow, steps)
    workflow.steps.filter(step_number=failed_at).update(status="failed", error_message="boom")
    return workflow


def test_show__a_long_run_its_first_and_last_steps_and_the_one_it_failed_at():
    workflow = long_failed_run(20_000, failed_at=7_001)
    shown = run_json("show", str(workflow.pk))
    assert [s["step_number"] for s in shown["steps"]] == [*range(1, 11), 7_001, *range(19_991, 20_001)]
    assert shown["step_count"] == 20_000
    assert shown["steps_not_shown"] == [{"first": 11, "last": 7_000}, {"first": 7_002, "last": 19_990}]
    text = run("show", str(workflow.pk))
    assert "21 of 20,000 steps shown; --steps FROM:TO shows others" in text
    assert "6,990 not shown (--steps 11:7000)" in text and "12,989 not shown (--steps 7002:19990)" in text


def test_show__the_steps_asked_for():
    workflow = long_failed_run(20_000, failed_at=7_001)
    shown = run_json("show", str(workflow.pk), "--steps", "15000:15999")
    # Beside the first ten, the one it failed at and the last ten: a thousand steps, in the terminal.
    assert [s["step_number"] for s in shown["steps"]][11:1011] == list(range(15_000, 16_000))
    assert shown["steps_not_shown"][-1] == {"first": 16_000, "last": 19_990}


def test_show__refuses_steps_that_are_no_range():
    workflow = long_failed_run(100, failed_at=50)
    error = refused("show", str(workflow.pk), "--steps", "ten")
    assert "is neither a step number nor a range of steps FROM:TO" in str(error)

"""``@task`` functions run by real ``runworkers`` processes, read back with get_result."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time

import pytest

pytest.importorskip("django.tasks")

from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.utils import timezone

from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import ROOT, run_burst, start_workers
from tests.testapp import tasks
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def burst(*args: str) -> None:
    result = run_burst(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_burst__runs_tasks_and_get_result_reads_their_outcomes():
    added = tasks.add.enqueue(2, 3)
    async_added = tasks.async_add.enqueue(4, 5)
    context = tasks.remember.enqueue("context")
    declined = tasks.decline.using(backend="no_retries").enqueue("card declined")
    burst()

    assert tasks.add.get_result(added.id).return_value == 5
    assert tasks.async_add.get_result(async_added.id).return_value == 9
    value = tasks.remember.get_result(context.id).return_value
    assert (value["id"], value["attempt"], value["status"]) == (context.id, 1, "RUNNING")
    added.refresh()
    assert (added.status, added.attempts, added.return_value) == (TaskResultStatus.SUCCESSFUL, 1, 5)
    assert added.worker_ids[0].count(":") == 2  # host:pid:nonce of the runworkers process

    failed = tasks.decline.get_result(declined.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    [error] = failed.errors
    assert error.exception_class_path == "tests.testapp.tasks.Declined"
    assert 'tests/testapp/tasks.py", line' in error.traceback
    assert error.traceback.rstrip().endswith("tests.testapp.tasks.Declined: card declined")


def test_runworkers__retries_a_failing_task_with_backoff(workers):
    flaky = tasks.flaky.enqueue(3)
    declined = tasks.decline.enqueue("always")
    workers.append(start_workers("--concurrency", "2"))

    def finished() -> bool:
        return all(default_task_backend.get_result(r.id).is_finished for r in (flaky, declined))

    assert wait_for(finished, timeout=60)
    flaky.refresh()
    assert (flaky.status, flaky.attempts, flaky.return_value) == (TaskResultStatus.SUCCESSFUL, 3, {"attempt": 3})
    declined.refresh()
    assert (declined.status, declined.attempts) == (TaskResultStatus.FAILED, 4)
    assert declined.errors[0].traceback.rstrip().endswith("tests.testapp.tasks.Declined: always")


def test_burst__runs_higher_priority_first_and_serves_only_its_queues():
    low = tasks.remember.using(priority=-10).enqueue("low")
    default = tasks.remember.enqueue("default")
    high = tasks.remember.using(priority=50).enqueue("high")
    emails = tasks.remember.using(queue_name="emails", priority=100).enqueue("emails")

    burst("--concurrency", "1", "--queues", "default")
    assert list(StepRun.objects.order_by("id").values_list("label", flat=True)) == ["high", "default", "low"]
    assert all(default_task_backend.get_result(r.id).status == "SUCCESSFUL" for r in (low, default, high))
    assert default_task_backend.get_result(emails.id).status == TaskResultStatus.READY

    burst("--queues", "emails")
    emails.refresh()
    assert (emails.status, emails.return_value["queue"], emails.return_value["priority"]) == (
        "SUCCESSFUL",
        "emails",
        100,
    )


def test_run_after__a_task_waits_until_it_is_due():
    later = tasks.add.using(run_after=timezone.now() + datetime.timedelta(hours=1)).enqueue(1, 1)
    due = tasks.add.using(run_after=timezone.now() - datetime.timedelta(seconds=1)).enqueue(2, 2)
    burst()
    assert default_task_backend.get_result(due.id).return_value == 4
    assert default_task_backend.get_result(later.id).status == TaskResultStatus.READY
    Workflow.objects.filter(pk=later.id).update(run_after=timezone.now())
    burst()
    assert default_task_backend.get_result(later.id).return_value == 2


def test_enqueue_in_a_transaction__is_run_only_after_commit_and_never_after_rollback(workers):
    workers.append(start_workers("--poll-interval", "0.1", "--concurrency", "1"))
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.remember.enqueue("rolled back")
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = tasks.remember.enqueue("committed")
        time.sleep(1.0)
        assert default_task_backend.get_result(committed.id).status == TaskResultStatus.READY
    assert wait_for(lambda: default_task_backend.get_result(committed.id).is_finished, timeout=20)
    assert not Workflow.objects.filter(pk=rolled_back.id).exists()
    assert list(StepRun.objects.values_list("label", flat=True)) == ["committed"]


SCRIPT_WITHOUT_THE_APP = """
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    TASKS={"default": {"BACKEND": "orchestration.tasks.WorkflowBackend", "QUEUES": ["default", "a,b"]}},
)
django.setup()
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.tasks import task  # as a project's code does; it registers Django's task checks

@task
def send(order_id):
    return order_id

try:
    call_command("check")
except SystemCheckError as exc:
    print(exc)
try:
    send.enqueue(1)
except ImproperlyConfigured as exc:
    print("enqueue:", exc)
"""


def test_backend_without_the_app__is_explained_by_check_and_by_enqueue():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT_WITHOUT_THE_APP], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "orchestration.E010" in out and "'orchestration' is not in INSTALLED_APPS" in out
    assert "orchestration.E004" in out and "does not use PostgreSQL" in out
    assert "orchestration.E011" in out and "TASKS['default']['QUEUES']" in out
    assert "enqueue: TASKS['default'] uses orchestration.tasks.WorkflowBackend, but 'orchestration' is not" in out

"""A worker whose link to PostgreSQL goes silent (its packets dropped, nothing
reset or closed) says so within a quarter of ``STUCK_AFTER``, and carries on
when the link returns: its connections give the link up (TCP keepalives,
``tcp_user_timeout``, ``connect_timeout``) instead of waiting on it for
minutes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStatus
from orchestration.worker.links import dead_link_seconds
from tests import silent_link
from tests.acceptance.test_runworkers import wait_for
from tests.support import WorkerProcess, start_workers, worker_env
from tests.testapp.models import StepRun

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.serial,  # the outage line within seconds of the cut
    pytest.mark.skipif(silent_link.available() is not None, reason=str(silent_link.available())),
]

STUCK_AFTER = 16.0  # a silent link is given up after 4 s
#: How much later than the bound the line may come: idle threads wait for NOTIFY without polling, so the
#: services thread's next heartbeat or keepalive probe notices, then the log's flush, on a loaded machine.
SLACK = 4.0


@pytest.fixture
def link() -> Iterator[silent_link.SilentLink]:
    made = silent_link.SilentLink(connection.get_connection_params())
    yield made
    made.close()


def seconds_until_logged(process: WorkerProcess, text: str, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if text in process.log_path.read_text(errors="replace"):
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def test_silent_link__is_logged_as_an_outage_within_a_quarter_of_stuck_after_and_its_run_carries_on(link, workers):
    run = start_workflow("slow", {"seconds": 3, "steps": 2})
    env = worker_env(DATABASE_URL=link.url(), ORCHESTRATION_STUCK_AFTER=str(STUCK_AFTER))
    process = start_workers("--concurrency", "2", env=env, preexec_fn=link.enter)
    workers.append(process)
    assert wait_for(lambda: StepRun.objects.filter(workflow_id=run.pk).exists(), timeout=30)

    link.cut()  # while step 1's body sleeps: the idle thread's polls, the heartbeat, the listener go silent
    bound = dead_link_seconds(STUCK_AFTER)
    noticed = seconds_until_logged(process, "is unavailable", timeout=bound + SLACK)
    link.restore()

    output = process.log_path.read_text(errors="replace")
    assert noticed is not None, f"no outage logged within {bound + SLACK}s of the cut:\n{output}"
    assert wait_for(lambda: Workflow.objects.get(pk=run.pk).status == WorkflowStatus.COMPLETED, timeout=60), output
    assert Workflow.objects.get(pk=run.pk).attempts == 1  # its writes landed after the link returned
    assert sorted(StepRun.objects.filter(workflow_id=run.pk).values_list("step_number", flat=True)) == [1, 2]
    assert process.poll() is None, "the worker carries on"
    after = start_workflow("echo", "after the link returned")
    assert wait_for(lambda: Workflow.objects.get(pk=after.pk).status == WorkflowStatus.COMPLETED, timeout=30)

"""orchestration.testing: the due runs run in the test's own thread and transaction."""

from __future__ import annotations

import time

import pytest
from django.db import transaction
from django.test import TestCase

from orchestration import send_event, start_workflow
from orchestration.models import Workflow
from orchestration.testing import RunWorkflowsTimeout, advance, history, run_workflows, steps
from tests.support import other_connection
from tests.testapp.models import StepRun


class RunWorkflowsInATestCase(TestCase):
    """Inside ``TestCase``: nothing the test writes is committed, and the kit still runs it."""

    def test_run_workflows__runs_a_run_started_in_the_test_transaction(self) -> None:
        run = start_workflow("three_steps", {"order": 7})

        finished = run_workflows()

        self.assertEqual(finished, [run])
        run.refresh_from_db()
        self.assertEqual(run.status, "completed")
        self.assertEqual(run.output_data, {"steps": [1, 2, 3], "input": {"order": 7}})
        self.assertEqual(StepRun.objects.filter(workflow_id=run.pk).count(), 3)

    def test_run_workflows__commits_nothing_of_the_test(self) -> None:
        with transaction.atomic():  # as a view would start it, with its own rows
            run = start_workflow("three_steps")

        run_workflows()

        with other_connection() as other:
            self.assertEqual(other.execute("SELECT count(*) FROM workflows").fetchone(), (0,))
            self.assertEqual(other.execute("SELECT count(*) FROM workflow_steps").fetchone(), (0,))
        run.refresh_from_db()
        self.assertEqual(run.status, "completed")

    def test_steps__reads_each_step_with_its_output(self) -> None:
        run = start_workflow("three_steps")
        run_workflows()

        self.assertEqual(
            steps(run),
            [
                (1, "first", "completed", {"step": 1, "label": "first"}, None),
                (2, "second", "completed", {"step": 2, "label": "second"}, None),
                (3, "third", "completed", {"step": 3, "label": "third"}, None),
            ],
        )

    def test_run_workflows__retries_a_failing_step_until_it_succeeds(self) -> None:
        run = start_workflow("flaky", {"succeed_on": 3})

        finished = run_workflows(skip_waits=True)

        self.assertEqual(finished, [run])
        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("completed", 3))
        self.assertEqual(
            [(entry["attempt"], entry["status"]) for entry in history(run)], [(1, "pending"), (2, "pending")]
        )
        self.assertIn("flaky failure on attempt 2", history(run)[-1]["message"])

    def test_run_workflows__fails_a_run_once_its_retries_are_spent(self) -> None:
        run = start_workflow("always_fails")

        finished = run_workflows(skip_waits=True)

        run.refresh_from_db()
        self.assertEqual(finished, [run])
        self.assertEqual((run.status, run.attempts), ("failed", 3))
        self.assertEqual(steps(run)[-1].status, "failed")
        self.assertEqual(steps(run)[-1].error, history(run)[-1]["message"].split(": ", 1)[1])

    def test_run_workflows__without_skip_waits_leaves_a_backoff_pending(self) -> None:
        run = start_workflow("always_fails", max_retries=1)
        with self.settings(ORCHESTRATION={"RETRY_BACKOFF": 3600, "RETRY_BACKOFF_MAX": 3600}):
            self.assertEqual(run_workflows(), [])

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("pending", 1))

    def test_run_workflows__leaves_a_run_waiting_for_an_event_pending_until_it_is_sent(self) -> None:
        run = start_workflow("awaits_approval")

        self.assertEqual(run_workflows(skip_waits=True), [])
        run.refresh_from_db()
        self.assertEqual((run.status, run.waiting_for), ("pending", "event: approval"))

        send_event(run, "approval", {"approved": True})
        self.assertEqual(run_workflows(), [run])
        run.refresh_from_db()
        self.assertEqual(run.output_data, {"decision": {"approved": True}})

    def test_run_workflows__skips_an_hour_long_sleep(self) -> None:
        run = start_workflow("sleeper", {"seconds": 3600})
        began = time.monotonic()

        finished = run_workflows(skip_waits=True)

        self.assertLess(time.monotonic() - began, 1.0)
        self.assertEqual(finished, [run])
        self.assertEqual([step.name for step in steps(run)], ["before", "nap", "after"])

    def test_run_workflows__leaves_a_sleep_pending_without_skip_waits(self) -> None:
        run = start_workflow("sleeper", {"seconds": 3600})

        self.assertEqual(run_workflows(), [])

        run.refresh_from_db()
        self.assertEqual(run.status, "pending")
        self.assertTrue(run.waiting_for.startswith("timer: nap"))

    def test_advance__ends_a_sleep_once_its_time_has_passed(self) -> None:
        run = start_workflow("sleeper", {"seconds": 3600})
        run_workflows()

        advance(3599)
        self.assertEqual(run_workflows(), [])
        advance(2)
        self.assertEqual(run_workflows(), [run])

    def test_advance__times_out_an_event_wait(self) -> None:
        run = start_workflow("awaits_approval", {"timeout": 60})
        run_workflows()

        advance(61)
        run_workflows()

        run.refresh_from_db()
        self.assertEqual(run.status, "failed")
        self.assertIn("EventTimeout", run.error_message)

    def test_advance__cancels_a_run_past_its_deadline(self) -> None:
        run = start_workflow("sleeper", {"seconds": 3600}, timeout=600)
        run_workflows()

        advance(601)
        finished = run_workflows()

        run.refresh_from_db()
        self.assertEqual(finished, [run])
        self.assertEqual(run.status, "cancelled")
        self.assertIn("Deadline", run.error_message)

    def test_run_workflows__runs_children_and_their_parent(self) -> None:
        parent = start_workflow("fan_out", {"children": 3})

        finished = run_workflows()

        self.assertEqual(finished[-1], parent)
        self.assertEqual(len(finished), 4)
        parent.refresh_from_db()
        self.assertEqual(parent.output_data, [0, 1, 4])

    def test_run_workflows__runs_a_step_under_a_time_limit_in_the_test_transaction(self) -> None:
        run = start_workflow("three_steps", timeout=600)  # a deadline: each step runs under a limit

        self.assertEqual(run_workflows(), [run])

        self.assertEqual(StepRun.objects.filter(workflow_id=run.pk).count(), 3)
        with other_connection() as other:  # nothing committed: it rolls back with the test
            self.assertEqual(other.execute("SELECT count(*) FROM testapp_steprun").fetchone(), (0,))

    def test_run_workflows__fails_a_step_past_its_timeout(self) -> None:
        run = start_workflow("overruns_its_step_timeout", {"seconds": 0.3, "limit": 0.1})

        run_workflows()

        run.refresh_from_db()
        self.assertEqual(run.status, "failed")
        self.assertIn("StepTimeout", run.error_message)
        self.assertIn("its result was dropped", run.error_message)

    def test_run_workflows__runs_an_async_workflow_in_the_test_transaction(self) -> None:
        run = start_workflow("async_mixed", {"nap": 3600})

        self.assertEqual(run_workflows(skip_waits=True), [run])

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("completed", 2))
        with other_connection() as other:
            self.assertEqual(other.execute("SELECT count(*) FROM testapp_steprun").fetchone(), (0,))

    def test_run_workflows__names_a_run_that_loops_for_ever_and_its_last_step(self) -> None:
        finished_first = start_workflow("three_steps")
        run = start_workflow("loops_forever", priority=-1)

        with self.assertRaises(RunWorkflowsTimeout) as raised:
            run_workflows(timeout=0.5)

        self.assertIn(str(run.pk), str(raised.exception))
        self.assertRegex(str(raised.exception), r'its last step: \d+ "turn \d+"')
        self.assertEqual(raised.exception.finished, [finished_first])
        run.refresh_from_db()
        self.assertEqual(run.status, "pending")


# -- pytest-django -------------------------------------------------------------------


def test_run_workflows_fixture__runs_in_the_tests_transaction(run_workflows) -> None:  # type: ignore[no-untyped-def]
    run = start_workflow("three_steps")

    assert run_workflows() == [run]
    assert Workflow.objects.get(pk=run.pk).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_run_workflows_fixture__runs_with_transactional_db(run_workflows) -> None:  # type: ignore[no-untyped-def]
    run = start_workflow("sleeper", {"seconds": 3600})

    assert run_workflows(skip_waits=True) == [run]
    assert Workflow.objects.get(pk=run.pk).status == "completed"


def test_run_workflows_fixture__comes_with_transactional_db(transactional_db, run_workflows) -> None:  # type: ignore[no-untyped-def]
    run = start_workflow("awaits_approval")
    assert run_workflows() == []

    send_event(run, "approval", "yes")

    assert run_workflows() == [run]


def test_run_workflows_fixture__retries_a_failing_step(run_workflows) -> None:  # type: ignore[no-untyped-def]
    run = start_workflow("flaky", {"succeed_on": 2})

    assert run_workflows(skip_waits=True) == [run]
    assert [entry["attempt"] for entry in history(run)] == [1]


def test_run_workflows_fixture__runs_children_then_their_parent(run_workflows) -> None:  # type: ignore[no-untyped-def]
    parent = start_workflow("fan_out", {"children": 2})

    finished = run_workflows()

    assert len(finished) == 3 and finished[-1] == parent
    assert Workflow.objects.get(pk=parent.pk).output_data == [0, 1]


def test_run_workflows_fixture__commits_nothing_of_the_test(run_workflows) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        run = start_workflow("three_steps")

    assert run_workflows() == [run]
    with other_connection() as other:
        assert other.execute("SELECT count(*) FROM workflows").fetchone() == (0,)


def test_advance__in_pytest_ends_a_sleep(run_workflows) -> None:  # type: ignore[no-untyped-def]
    run = start_workflow("sleeper", {"seconds": 60})
    assert run_workflows() == []

    advance(60)

    assert run_workflows() == [run]

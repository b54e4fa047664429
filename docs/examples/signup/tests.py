"""The tests of "Testing workflows" (docs/how-to/testing-workflows.md), as ``manage.py test`` runs them."""

# --8<-- [start:imports]
from datetime import timedelta
from unittest import mock

from django.contrib.auth.models import User
from django.test import TestCase

from orchestration import send_event, start_workflow
from orchestration.testing import advance, history, run_workflows, steps

# --8<-- [end:imports]


class WelcomeTests(TestCase):
    # --8<-- [start:unit]
    def test_a_new_user_is_welcomed(self):
        # The test's rows are not committed: run_workflows sees them, on the test's connection.
        user = User.objects.create(username="ada", email="ada@example.com")
        run = start_workflow("welcome", {"email": "ada@example.com"})

        finished = run_workflows(skip_waits=True)  # the day's sleep is skipped

        self.assertEqual(finished, [run])
        run.refresh_from_db()
        self.assertEqual((run.status, run.output_data), ("completed", {"user_id": user.pk}))
        self.assertEqual(
            [(step.name, step.status) for step in steps(run)],
            [
                ("create account", "completed"),
                ("fetch contacts", "completed"),
                ("let them settle in", "completed"),
                ("send welcome", "completed"),
            ],
        )

    # --8<-- [end:unit]
    # --8<-- [start:retries]
    def test_a_failing_address_book_is_retried(self):
        User.objects.create(username="ada", email="ada@example.com")
        run = start_workflow("welcome", {"email": "ada@example.com"})
        outage = [ConnectionError("address book down"), ConnectionError("address book down"), ["grace"]]

        with mock.patch("signup.workflows.fetch_contacts", side_effect=outage):
            run_workflows(skip_waits=True)  # the backoffs between attempts are skipped too

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("completed", 3))
        self.assertEqual([entry["attempt"] for entry in history(run)], [1, 2])
        self.assertIn("address book down", history(run)[0]["message"])
        self.assertEqual(steps(run)[-1].output, {"sent_to": "ada@example.com", "contacts": 1})

    def test_an_address_book_that_stays_down_fails_the_run(self):
        User.objects.create(username="ada", email="ada@example.com")
        run = start_workflow("welcome", {"email": "ada@example.com"})

        with mock.patch("signup.workflows.fetch_contacts", side_effect=ConnectionError("down")):
            run_workflows(skip_waits=True)

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("failed", 4))  # max_retries=3: four attempts
        self.assertEqual(steps(run)[1].error, "ConnectionError: down")

    # --8<-- [end:retries]
    # --8<-- [start:sleep]
    def test_the_welcome_waits_a_day(self):
        User.objects.create(username="ada", email="ada@example.com")
        run = start_workflow("welcome", {"email": "ada@example.com"})

        run_workflows()  # without skip_waits the sleep is a day long
        run.refresh_from_db()
        self.assertEqual(run.status, "pending")
        self.assertTrue(run.waiting_for.startswith("timer: let them settle in"))

        advance(timedelta(hours=23))
        self.assertEqual(run_workflows(), [])
        advance(timedelta(hours=1))
        self.assertEqual(run_workflows(), [run])

    # --8<-- [end:sleep]
    # --8<-- [start:children]
    def test_a_team_is_welcomed_one_run_each(self):
        for name in ("ada", "grace"):
            User.objects.create(username=name, email=f"{name}@example.com")
        parent = start_workflow("welcome_team", {"emails": ["ada@example.com", "grace@example.com"]})

        finished = run_workflows(skip_waits=True)

        self.assertEqual(len(finished), 3)  # both children, then their parent
        self.assertEqual(finished[-1], parent)
        parent.refresh_from_db()
        self.assertEqual(len(parent.output_data), 2)

    # --8<-- [end:children]


class ApprovalTests(TestCase):
    # --8<-- [start:event]
    def test_an_approval_arrives(self):
        run = start_workflow("approval")

        self.assertEqual(run_workflows(), [])  # it waits for its event, pending
        send_event(run, "decision", {"approved": True})
        self.assertEqual(run_workflows(), [run])

        run.refresh_from_db()
        self.assertEqual(run.output_data, {"approved": True})

    def test_no_answer_within_48_hours_declines(self):
        run = start_workflow("approval")
        run_workflows()

        advance(timedelta(hours=48, seconds=1))
        run_workflows()

        run.refresh_from_db()
        self.assertEqual(run.output_data, {"approved": False, "why": "no answer within 48 hours"})

    # --8<-- [end:event]
